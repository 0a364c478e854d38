#!/bin/bash
# benchmarks/serve_profile.py on the GPU machine, with a vLLM site carried in parts
# (docs/serving-speed.md says how the parts are made and carried).
# usage: bash benchmarks/gpu_serve.sh VER [serve_profile.py arguments]
#   VER: the site's label (20 for vLLM 0.20.0, 26 for 0.26.0); its parts were copied to /tmp/parts$VER/
#   before, one device call per part; the model configs travel in .gpucarry/models.
# Writes $OUT/serve-vVER.json and $OUT/serve-vVER.tar.gz (logs, a few traces).
set -eu
ver=$1; shift
site=/tmp/site$ver
if [ ! -d $site/vllm ]; then
  mkdir -p $site && cat /tmp/parts$ver/site-* | xz -d -T8 | tar xf - -C $site
fi
export PYTHONPATH=$site:$PWD
work=/tmp/serve-v$ver
mkdir -p $work
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
set +e
python3 benchmarks/serve_profile.py --models "$PWD/.gpucarry/models" --out $work --tag "v$ver/" "$@"
rc=$?
cp $work/serve_profile.json $OUT/serve-v$ver.json 2>/dev/null
tar czf $OUT/serve-v$ver.tar.gz -C $work logs $(cd $work && ls -d traces 2>/dev/null) 2>/dev/null
ls -la $OUT
exit $rc
