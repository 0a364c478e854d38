"""``collective_rpc(..., unique_reply_rank=r)`` returns the single reply, not a list.

vLLM 0.11.1 (``vllm/v1/executor/multiproc_executor.py``, ``MultiprocExecutor.collective_rpc``):
with ``unique_reply_rank`` set, the executor returns ``responses[0]`` itself.  speculators 0.3.0
still indexes the result with ``[0]``, which then picks the *first layer's* tensor out of the
list of captured layers: the pipeline runs and silently returns one ``[T, H]`` tensor where it
should return one per layer (the [771, 7168] bug this project started from).  0.4.0 already
uses the reply as it is.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.collective_rpc_single_reply",
    title="use collective_rpc's single reply as it is (no [0])",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.11.1"},
    why="An old `[0]` on the single reply keeps one layer's tensor instead of all captured layers.",
    upstream="vLLM 0.11.1: MultiprocExecutor.collective_rpc returns responses[0] when unique_reply_rank is set.",
    remove_when="speculators 0.4.0 (uses the reply directly); drop with 0.3.x support.",
    edits=(
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            old="aux_hidden_states = captured_states_list[0]",
            new="aux_hidden_states = captured_states_list",
        ),
    ),
), __name__)
