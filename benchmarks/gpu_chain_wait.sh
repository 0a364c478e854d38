#!/bin/bash
# One device call of the background run benchmarks/gpu_draft_chain.sh (GPU_CALLS_DRAFT.md, 2026-12-07):
# optionally start it, wait up to WAIT_S seconds for it to finish, print where it is, and put what
# it made under $OUT (at most 8 files come back: results.tgz with every summary and log, and with
# `final` the packed draft, ckpt.tar.NN and ckpt.sha256).
# `final` also returns as soon as the draft is packed (after the 0.20.0 speed): /tmp/out/packed.
# usage (repo root): bash benchmarks/gpu_chain_wait.sh start|watch|final WAIT_S
set -u
mode=$1; wait_s=$2
T0=$(date +%s)
if [ "$mode" = start ] && [ ! -f /tmp/chain.started ]; then
  touch /tmp/chain.started
  setsid nohup bash benchmarks/gpu_draft_chain.sh > /tmp/chain.log 2>&1 < /dev/null &
  echo "chain started (pid $!)"
fi
while [ ! -f /tmp/chain.done ] && [ $(( $(date +%s) - T0 )) -lt "$wait_s" ]; do
  [ "$mode" = final ] && [ -f /tmp/out/packed ] && break
  sleep 3
done
echo "--- waited $(( $(date +%s) - T0 ))s; done: $(cat /tmp/chain.done 2>/dev/null || echo no)"
grep -h "^\[chain\|: rc \|skipped\|not started\|setup took\|vLLM installed\|verify: exit\|^call took" /tmp/chain.log 2>/dev/null | tail -n 30
ls /tmp/draft/logs 2>/dev/null | tr '\n' ' '; echo
python3 - <<'PY'
import json, os
def show(name, s):
    if not s:
        return
    print(f"{name}: {s.get('device')} vLLM {s.get('vllm')} k={s.get('k')} prompts {s.get('prompts')} max_tokens {s.get('max_tokens')}")
    for b, r in s.get("batches", {}).items():
        print(f"  B={b}: " + ", ".join(f"{k} {r.get(k)}" for k in (
            "tokens_per_s_verifier", "tokens_per_s_with_draft", "speedup", "mean_acceptance_length",
            "ms_per_step_verifier", "ms_per_step_with_draft", "repeats", "outputs_equal")))
    print("  " + str(s.get("verdict")))
p = "/tmp/draft/draft.json"
d = json.load(open(p)) if os.path.exists(p) else {"stages": {}}
for k, v in d["stages"].items():
    r = v.get("result") or {}
    line = json.dumps(v.get("first_traceback")) if v["rc"] else ""
    if k == "train":
        line = json.dumps([(x["train_config"].get("steps"), x["train_config"].get("train_samples"), x["best"])
                           for x in r.get("runs", [])])
    if k in ("eval", "speed"):
        line = f"acceptance {r.get('mean_acceptance_length')} per position {r.get('acceptance_per_position')}"
    print(f"{k}: rc {v['rc']} {v['wall_s']:.1f}s {line[:600]}")
    if k == "speed":
        show("speed 0.20", r.get("speed"))
for tag in ("20", "26"):
    p = f"/tmp/out/speed{tag}.json"
    if os.path.exists(p) and os.path.getsize(p):
        show(f"speed {tag}", json.load(open(p)).get("speed"))
PY
[ -n "${OUT:-}" ] || exit 0
cp /tmp/chain.log /tmp/out/chain.log 2>/dev/null
cp /tmp/draft/draft.json /tmp/out/draft-work.json 2>/dev/null
cp /tmp/draft/logs/train.log /tmp/out/train.log 2>/dev/null
( cd /tmp/out && tar czf "$OUT/results.tgz" --exclude='ckpt.tar.*' . )
ls -l "$OUT/results.tgz"
if [ "$mode" = final ]; then
  cp /tmp/out/ckpt.tar.* /tmp/out/ckpt.sha256 "$OUT/" 2>/dev/null
  ls -l "$OUT"
fi
exit 0
