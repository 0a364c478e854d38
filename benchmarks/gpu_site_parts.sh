#!/bin/bash
# Repack gpu-vllm-bundle's wheels (/work/main/.gpucarry/p*/part-*) as one unpacked site folder,
# without vLLM's FA2 kernels (Hopper runs FA3: vllm/v1/attention/backends/fa_utils.py) and
# without xgrammar (loaded lazily, for structured outputs only), xz-compressed and split:
# 331 MiB of wheels become about 152 MiB, three device calls instead of six.
# usage: bash benchmarks/gpu_site_parts.sh BUNDLE_DIR OUT_DIR [PART_MIB...]   (OUT_DIR/site-NN)
set -eu
bundle=$1; out=$2; shift 2
work=$(mktemp -d)
cat "$bundle"/p*/part-* | tar xf - -C "$work"
mkdir "$work/site"
python3 -c "import glob, sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in glob.glob(sys.argv[2] + '/*.whl')]" "$work/site" "$work"
rm -f "$work"/site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so
rm -rf "$work"/site/xgrammar "$work"/site/xgrammar-*.dist-info
mkdir -p "$out"
tar cf - -C "$work/site" . | xz -T2 -6 | split -b "${1:-60}M" -d -a 2 - "$out/site-"
rm -rf "$work"
ls -la "$out"
