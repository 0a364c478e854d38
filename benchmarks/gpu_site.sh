# Sourced by the GPU call scripts (gpu_run.sh, gpu_draft.sh): vLLM carried in parts (copied to
# /tmp/parts by earlier calls) unpacked into /tmp/site once per machine, then (site_with_wheels)
# the carried .whl/ installed into it and speculators patched there by vllm-compat, once.
# Two ways to carry vLLM: the wheels of gpu-vllm-bundle (/tmp/parts/part-*), or those wheels
# already unpacked as one site folder in a tar.xz, in fewer parts (/tmp/parts/site-*; smaller:
# built by benchmarks/gpu_site_parts.sh without the FA2 kernels, which Hopper does not use).
# usage: site_unpack [PARTS SITE] (default /tmp/parts /tmp/site; another release: /tmp/parts26 /tmp/site26)
site_unpack() {
  local parts=${1:-/tmp/parts} site=${2:-/tmp/site}
  [ -d "$site/vllm" ] && return 0
  local t0; t0=$(date +%s)
  mkdir -p "$site"
  if ls "$parts"/site-* >/dev/null 2>&1; then
    ls -l "$parts"  # a part missing (the machine was not warm between calls) fails the unpack
    ( set -o pipefail
      cat "$parts"/site-* | python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer, 1 << 22)" \
        | tar xf - -C "$site" ) || { echo "vLLM unpack failed"; rm -rf "$site"; return 1; }
  else
    mkdir -p /tmp/b && cat "$parts"/part-* | tar xf - -C /tmp/b \
      && python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" /tmp/b/*.whl \
      || { echo "vLLM install failed"; return 1; }
  fi
  echo "vLLM installed in $(( $(date +%s) - t0 ))s"
}

# usage: site_with_wheels OUT (writes OUT/apply.txt)
site_with_wheels() {
  site_unpack || return 1
  if [ ! -d /tmp/site/speculators ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || return 1
  fi
  python3 -m vllm_compat apply --site-packages /tmp/site > "$1/apply.txt" 2>&1
  python3 -m vllm_compat verify --site-packages /tmp/site >> "$1/apply.txt" 2>&1
  local rc=$?
  echo "vllm-compat verify: exit $rc"; tail -n 4 "$1/apply.txt"
  return $rc
}
