#!/bin/bash
# The training benchmark (benchmarks/gpu_train.py) in one device call on the H200, or its dry run
# on the CPU (FC_DRY=1 PY=.venv/bin/python).  Carry [".whl"] (speculators 0.3.0 and the packages the
# H200 lacks: benchmarks/GPU_CALLS_TRAIN.md).  No vLLM there: the wheels go into their own $SITE,
# vllm-compat patches it with --allow-unsupported (the patches that need vLLM are not decided
# without it; training needs none of them), and everything, install included, ends within BUDGET s,
# running variants stopped in time so that their results are in $OUT.
# usage (repo root): bash benchmarks/gpu_train.sh [gpu_train.py args]
set -u
T0=$(date +%s)
BUDGET=${BUDGET:-145}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SITE=${SITE:-/tmp/site-train}
PY=${PY:-python3}
WHL=${WHL:-.whl}  # another folder when the call also carries gpu_run.sh's .whl
export PYTHONUNBUFFERED=1 PYTHONPATH=$SITE:$PWD
if [ "${FC_DRY:-}" = 1 ]; then
  WHEELS=$(ls $WHL/speculators-*.whl)  # the other wheels are cp312; the dry run's venv has those packages
else
  WHEELS=$(ls $WHL/*.whl)
fi
rm -rf "$SITE"
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" $WHEELS \
  || { echo "wheel install failed"; exit 1; }
$PY -m vllm_compat apply --site-packages "$SITE" --allow-unsupported > "$OUT/apply.txt" 2>&1 \
  || { tail -n 20 "$OUT/apply.txt"; exit 1; }
echo "installed and patched in $(( $(date +%s) - T0 ))s: $(head -n 1 "$OUT/apply.txt")"
[ "${FC_DRY:-}" = 1 ] || nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
LEFT=$(( BUDGET - ($(date +%s) - T0) ))
timeout -k 2 $(( LEFT - 1 )) $PY benchmarks/gpu_train.py --out "$OUT" --deadline $(( LEFT - 4 )) "$@" > "$OUT/log.txt" 2>&1
rc=$?
tail -c 6000 "$OUT/log.txt"
echo "gpu_train.sh: exit $rc after $(( $(date +%s) - T0 ))s"
exit $rc
