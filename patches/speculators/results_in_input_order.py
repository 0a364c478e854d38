"""speculators 0.4.0 returns results sorted by request id as strings, not in input order.

``generate`` builds ``results`` with ``for req_id in sorted(request_id_to_idx.keys())`` over ids
``req_{counter}_{i}``: a string sort puts ``req_0_10`` and ``req_0_11`` before ``req_0_2``, so
any batch of more than ten prompts comes back permuted (each result's ``input_ids`` matches its
states, but ``results[k]`` is not prompt ``k``).  Fix: iterate the dict in insertion order,
which is input order.  Not a vLLM break; applies with every vLLM.
"""

from vllm_compat.catalog.patch import Patch, ReplaceExpr, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.results_in_input_order",
    title="return results in input order (0.4.0)",
    target="speculators",
    target_versions=">=0.4.0,<0.5",
    why="A string sort of 'req_X_i' ids permutes batches of more than ten prompts.",
    upstream="speculators 0.4.0 vllm_hidden_states_generator.py generate: "
             "sorted(request_id_to_idx.keys()) (speculators' own bug, independent of vLLM).",
    remove_when="speculators returns results in input order.",
    edits=(
        ReplaceExpr(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            old="sorted(request_id_to_idx.keys())",
            new="request_id_to_idx",
        ),
    ),
), __name__)
