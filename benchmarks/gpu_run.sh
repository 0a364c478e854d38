#!/bin/bash
# Run the GPU benchmarks on the lent H200 with vLLM 0.20.0 carried in parts
# (see /work/shared/notes/vllm-on-h200.md): parts already copied to /tmp/parts by earlier calls.
# usage (device call, repo root): bash benchmarks/gpu_run.sh [gpu_extract.py args]
#        bash benchmarks/gpu_run.sh cli [gpu_cli.py args]   (carry .whl: speculators 0.3.0, libcst,
#        h2/hpack/hyperframe; speculators is installed into the vLLM site and patched there by
#        vllm-compat, then the eagle3 CLI and the generator run against it)
# CALL_S=N (cli): the whole call ends within N seconds of wall time, setup included: gpu_cli.py
#        gets what is left as --budget-s (it skips steps, kills its children at the end and keeps
#        what ran in $OUT/cli.json), under a `timeout` a few seconds longer.
set -u
T0=$(date +%s)
. benchmarks/gpu_site.sh
site_unpack || exit 1
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv
df -h /tmp /dev/shm
if [ "${1:-}" = cli ]; then
  shift
  site_with_wheels "$OUT" || exit 1
  if [ "${CALL_S:-0}" -gt 0 ]; then
    left=$(( CALL_S - ($(date +%s) - T0) - 6 ))
    echo "setup took $(( $(date +%s) - T0 ))s; gpu_cli gets ${left}s"
    timeout -k 3 "$left" python3 benchmarks/gpu_cli.py --out "$OUT" --site /tmp/site --budget-s $(( left - 4 )) "$@" > "$OUT/log.txt" 2>&1
  else
    timeout 555 python3 benchmarks/gpu_cli.py --out "$OUT" --site /tmp/site "$@" > "$OUT/log.txt" 2>&1
  fi
else
  python3 benchmarks/gpu_extract.py --out "$OUT" "$@" > "$OUT/log.txt" 2>&1
fi
rc=$?
grep -v "^(EngineCore\|^INFO\|^WARNING\|^(Worker\|it/s\]\|Writing model\|Loading safetensors" "$OUT/log.txt" | tail -c 6000
echo "call took $(( $(date +%s) - T0 ))s"
exit $rc
