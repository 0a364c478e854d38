"""A hybrid verifier on vLLM < 0.25: ExampleHiddenStatesConnector writes all-zero states.

With linear-attention or Mamba layers beside attention (Qwen3.5/3.6, Qwen3-Next), vLLM before
0.25 reads the extracted hidden states from the wrong KV cache group and block size, and the
connector saves zeros without an error; drafts trained on them reach near-0% acceptance
(speculators issues #613, #738).  vLLM PR #46301 (first in 0.25.0) finds the hidden-states
group by its spec and reads its own block size.
"""

from vllm_compat.catalog.advisory import Advisory, register
from vllm_compat.catalog.patch import Probe

VLLM = "vllm/distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py"

register(Advisory(
    id="hybrid_verifier_zero_states",
    title="a hybrid verifier on vLLM < 0.25: the hidden-states connector writes all-zero states",
    when={"speculators": ">=0.5", "vllm": "<0.25"},
    condition="hybrid-verifier",
    why="vLLM < 0.25 reads a hybrid verifier's extracted hidden states from the wrong KV cache group and "
        "block size: ExampleHiddenStatesConnector saves all-zero tensors without an error, and drafts "
        "trained on them reach near-0% acceptance",
    upstream="speculators issues #613 and #738; fixed by vLLM PR #46301, first in vLLM 0.25.0",
    fix="upgrade vLLM to 0.25.0 or later for a hybrid verifier (Qwen3.5/3.6, Qwen3-Next)",
    probes=(Probe("vllm", VLLM, r"class ExampleHiddenStatesConnector\b"),),
), __name__)
