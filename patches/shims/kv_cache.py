"""vLLM 0.33.0's KV-cache helpers under the names speculators' generator imports.

Vendored by vllm-compat as ``speculators/_vllm_compat_kv_cache.py`` for vLLM >= 0.33.0 only
(the ``speculators.kv_cache_planning`` patch): 0.33.0 moved the planning functions from
``vllm/v1/core/kv_cache_utils.py`` to ``vllm/v1/core/kv_cache_planning.py`` without a
re-export; the request-hashing helpers stayed.
"""

from vllm.v1.core.kv_cache_planning import (
    _get_kv_cache_groups_uniform_spec,
    get_kv_cache_config_from_groups,
    get_kv_cache_groups,
    unify_hybrid_kv_cache_specs,
)
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, resolve_kv_cache_block_sizes

__all__ = [
    "_get_kv_cache_groups_uniform_spec",
    "get_kv_cache_config_from_groups",
    "get_kv_cache_groups",
    "get_request_block_hasher",
    "init_none_hash",
    "resolve_kv_cache_block_sizes",
    "unify_hybrid_kv_cache_specs",
]
