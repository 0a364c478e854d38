#!/bin/bash
# Repack gpu-vllm-bundle's wheels (/work/main/.gpucarry/p*/part-*) as one unpacked site folder,
# without vLLM's FA2 kernels (Hopper runs FA3: vllm/v1/attention/backends/fa_utils.py),
# xz-compressed and split: 331 MiB of wheels become about 160 MiB, three device calls instead of six.
# xgrammar stays: vLLM 0.20.0 imports it with `from vllm import LLM` (vllm/v1/request.py ->
# structured_output/backend_xgrammar.py evaluates xgr.GrammarMatcher at class definition); the
# H200 run of 2026-12-03 without it failed there in every engine step.
# vLLM 0.26.0 pulls in video, MLA and CUDA-compiler packages that serving a dense model never
# imports; DROP (shell patterns of wheel file names) leaves them out, e.g. for 0.26.0:
#   DROP="tokenspeed_* nvidia_nvvm* nvidia_cuda_nvcc* nvidia_cuda_cccl* nvidia_cuda_nvdisasm* pynvvideocodec* torchcodec* humming_kernels*"
# (docs/gpu.md#serving-speed; Model Runner V2 also needs VLLM_USE_FLASHINFER_SAMPLER=0 there, flashinfer is not carried).
# usage: [DROP=...] bash benchmarks/gpu_site_parts.sh BUNDLE_DIR|SITE.tar.xz OUT_DIR [MIB ...]
#   OUT_DIR/sNN/site-NN, one folder per part (one carry path each); part NN is the NN-th MIB
#   given (default 59: each part under 60 MiB), the last part holds the rest.  A SITE.tar.xz
#   (this script's stream, e.g. earlier parts concatenated) is only split again.
set -eu
src=$1; out=$2; shift 2
sizes=("$@"); [ ${#sizes[@]} -gt 0 ] || sizes=(59)
work=$(mktemp -d)
if [ -f "$src" ]; then
  stream=$src
else
  cat "$src"/p*/part-* | tar xf - -C "$work"
  for pat in ${DROP:-}; do rm -f "$work"/$pat; done
  mkdir "$work/site"
  python3 -c "import glob, sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in glob.glob(sys.argv[2] + '/*.whl')]" "$work/site" "$work"
  rm -f "$work"/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so "$work"/site/vllm/vllm-rs
  find "$work/site" -name "*.a" -delete  # static archives (xgrammar's is 70 MB) only serve linking
  stream=$work/site.tar.xz
  tar cf - -C "$work/site" . | xz -T2 -6 > "$stream"
fi
xz -t "$stream"
total=$(stat -c %s "$stream"); offset=0; i=0
while [ "$offset" -lt "$total" ]; do
  mib=${sizes[$(( i < ${#sizes[@]} ? i : ${#sizes[@]} - 1 ))]}
  name=$(printf "%02d" "$i"); mkdir -p "$out/s$name"
  tail -c +$(( offset + 1 )) "$stream" | head -c $(( mib << 20 )) > "$out/s$name/site-$name"
  offset=$(( offset + (mib << 20) )); i=$(( i + 1 ))
done
cat "$out"/s*/site-* | cmp - "$stream"
rm -rf "$work"
ls -l "$out"/s*/site-*
