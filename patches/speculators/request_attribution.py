"""speculators 0.3.0 attributes captured rows to prompts by position: use the request ids.

0.3.0 concatenates every step's captured rows and slices them by prompt length in input order
(``generate``).  That is only right when one step holds every prompt in input order.  From
vLLM 0.11.1 chunked prefill is on by default (``vllm/config/scheduler.py``
``enable_chunked_prefill=True``), so a batch over ``max_num_batched_tokens`` is split across
steps; the V1 runner may reorder requests and Model Runner V2 (0.22.0+) sorts them by
scheduled-token count.  With ``speculators.capture_hooks`` the worker returns
``{request id: [tensor per layer]}``; this patch looks each prompt up by the request id the
generator gave it (``req_{counter}_{i}``; the counter was already advanced), so results follow
input order whatever the batch layout.  ``speculators.chunked_prefill_default`` keeps
unfinished prefills running.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.request_attribution",
    title="look captured states up by request id (0.3.0)",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.11.1"},
    after=("speculators.capture_hooks", "speculators.collective_rpc_single_reply"),
    why="Slicing one concatenation by prompt length assumes one step in input order; vLLM "
        "chunks (0.11.1 default) and reorders (V1 reorder, Model Runner V2 sort) requests.",
    upstream="vLLM 0.11.1 vllm/config/scheduler.py enable_chunked_prefill=True; 0.22.0 "
             "vllm/v1/worker/gpu/model_runner.py sort_batch_req_ids.",
    remove_when="drop with speculators 0.3.x support (0.4.0 returns states per request id).",
    edits=(
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            old=(
                "layer_states = [\n"
                "    h[offset : offset + seq_len].clone().cpu() for h in aux_hidden_states\n"
                "]\n"
            ),
            # no .clone().cpu(): capture_hooks' worker hands over host tensors it no longer holds
            # (and speculators.states_in_shared_memory's rewrite of that call then has nothing to
            # change here, so this statement stays what this patch wrote: a fixed point)
            new=(
                "layer_states = [\n"
                '    h for h in aux_hidden_states[f"req_{self._request_counter - 1}_{i}"]\n'
                "]\n"
            ),
        ),
    ),
), __name__)
