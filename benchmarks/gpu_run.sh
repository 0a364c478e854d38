#!/bin/bash
# Run benchmarks/gpu_extract.py on the lent H200 with vLLM 0.20.0 carried in parts
# (see /work/shared/notes/vllm-on-h200.md): parts already copied to /tmp/parts by earlier calls.
# usage (device call, repo root): bash benchmarks/gpu_run.sh [gpu_extract.py args]
set -u
if [ ! -d /tmp/site/vllm ]; then
  t0=$(date +%s)
  mkdir -p /tmp/b && cat /tmp/parts/part-* | tar xf - -C /tmp/b \
    && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/b/*.whl \
    || { echo "vLLM install failed"; exit 1; }
  echo "vLLM installed in $(( $(date +%s) - t0 ))s"
fi
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv
df -h /tmp /dev/shm
python3 benchmarks/gpu_extract.py --out "$OUT" "$@" > "$OUT/log.txt" 2>&1
rc=$?
grep -v "^(EngineCore\|^INFO\|^WARNING\|^(Worker\|it/s\]" "$OUT/log.txt" | tail -c 6000
exit $rc
