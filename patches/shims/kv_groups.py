"""vLLM's own KV-cache grouping for speculators' generator, from wherever the installed vLLM
defines it (vendored as ``speculators/_vllm_compat_kv_groups.py`` by ``speculators.kv_cache_groups``), and
the scheduler block sizes for several groups (``speculators.scheduler_block_size_groups``).

``get_kv_cache_groups`` lives in ``vllm/v1/core/kv_cache_utils.py`` up to 0.32 and in
``vllm/v1/core/kv_cache_planning.py`` from 0.33.0 (no re-export).  Importing it here keeps the
generator's own code free of the module path that ``speculators.kv_cache_planning`` rewrites.
"""

try:  # vLLM >= 0.33.0
    from vllm.v1.core.kv_cache_planning import get_kv_cache_groups
except ImportError:  # vLLM < 0.33
    from vllm.v1.core.kv_cache_utils import get_kv_cache_groups
from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes  # there in every release >= 0.20

__all__ = ["get_kv_cache_groups", "resolve_kv_cache_block_sizes"]
