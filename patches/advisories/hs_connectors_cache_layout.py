"""hs-connectors 0.7.x reads vLLM >= 0.29's hidden-states cache with the old layout.

vLLM PR #51718 (first in 0.29.0) changed the view of the extract_hidden_states cache to
``[blocks, heads, block_size, hidden]`` and its own ``extract_from_kv_cache`` to index
``shape[2]``.  hs-connectors 0.7.0 ships its own copy of ``extract_from_kv_cache`` that still
takes ``shape[1]`` as the block size (and a connector that asks for layout "NHD"), so the
Mooncake connector's reads fail on shapes or gather the wrong slots.  hs-connectors 0.8.0 imports
vLLM's function instead (speculators PRs #1068, #1072).
"""

from vllm_compat.catalog.advisory import Advisory, register
from vllm_compat.catalog.patch import Probe

HS = "hs_connectors/mooncake_hidden_states_connector.py"
VLLM = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"

register(Advisory(
    id="hs_connectors_cache_layout",
    title="hs-connectors 0.7 reads vLLM >= 0.29's hidden-states cache with the old [blocks, block_size, ...] layout",
    when={"hs_connectors": "<0.8", "vllm": ">=0.29", "speculators": ">=0.5"},  # (0.3/0.4 never load it)
    condition="mooncake-backend",
    why="vLLM 0.29 views the hidden-states cache as [blocks, heads, block_size, hidden]; hs-connectors 0.7's "
        "own extract_from_kv_cache still takes shape[1] (the heads) as the block size and asks for layout "
        "'NHD', so MooncakeHiddenStatesConnector fails on shapes or stores the states of the wrong slots",
    upstream="vLLM PR #51718 (0.29.0: the cache view); speculators PRs #1068 and #1072 (hs-connectors 0.8.0 "
             "uses vLLM's extract_from_kv_cache)",
    fix="pip install 'hs-connectors>=0.8' (speculators 0.8.0 pins 0.8.0, 0.9.0 pins 0.9.0)",
    probes=(Probe("hs_connectors", HS, r"block_size = kv_cache\.shape\[1\]"),
            Probe("vllm", VLLM, r"block_size = kv_cache\.shape\[2\]")),
), __name__)
