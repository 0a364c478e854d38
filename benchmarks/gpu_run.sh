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
# Two ways to carry vLLM: the wheels of gpu-vllm-bundle (/tmp/parts/part-*), or those wheels
# already unpacked as one site folder in a tar.xz, in fewer parts (/tmp/parts/site-*; smaller:
# built by benchmarks/gpu_site_parts.sh without the FA2 kernels, which Hopper does not use).
if [ ! -d /tmp/site/vllm ]; then
  t0=$(date +%s)
  mkdir -p /tmp/site
  if ls /tmp/parts/site-* >/dev/null 2>&1; then
    ls -l /tmp/parts  # a part missing (the machine was not warm between calls) fails the unpack
    ( set -o pipefail
      cat /tmp/parts/site-* | python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 22)" \
        | tar xf - -C /tmp/site ) || { echo "vLLM unpack failed"; rm -rf /tmp/site; exit 1; }
  else
    mkdir -p /tmp/b && cat /tmp/parts/part-* | tar xf - -C /tmp/b \
      && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/b/*.whl \
      || { echo "vLLM install failed"; exit 1; }
  fi
  echo "vLLM installed in $(( $(date +%s) - t0 ))s"
fi
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv
df -h /tmp /dev/shm
if [ "${1:-}" = cli ]; then
  shift
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  python3 -m vllm_compat apply --site-packages /tmp/site > "$OUT/apply.txt" 2>&1
  python3 -m vllm_compat verify --site-packages /tmp/site >> "$OUT/apply.txt" 2>&1
  echo "vllm-compat verify: exit $?"; tail -n 4 "$OUT/apply.txt"
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
