"""``execute_model`` returns None and must be followed by ``sample_tokens``.

vLLM 0.11.1 split a step in two (``vllm/v1/executor/abstract.py`` ``Executor.sample_tokens``;
``vllm/v1/worker/gpu_model_runner.py`` keeps an ``ExecuteModelState`` and returns ``None``).
A second ``execute_model`` without ``sample_tokens`` in between raises "State error:
sample_tokens() must be called after execute_model() returns None." (``gpu_model_runner.py``
L2633 in 0.11.1), so speculators 0.3.0 fails on its second scheduler step or second call.
Fix as vLLM's engine core does it (``EngineCore.step``): call ``sample_tokens`` when
``execute_model`` returned ``None``.  (0.4.0 already calls ``sample_tokens``.)
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.two_phase_execution",
    title="call sample_tokens after execute_model",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.11.1"},
    why="From vLLM 0.11.1 the worker refuses a second execute_model until sample_tokens ran.",
    upstream="vLLM 0.11.1: vllm/v1/executor/abstract.py Executor.sample_tokens; "
             "vllm/v1/worker/gpu_model_runner.py execute_model returns None (L2633 guard).",
    remove_when="drop with speculators 0.3.x support (0.4.0 calls sample_tokens).",
    edits=(
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            old="self.executor.execute_model(scheduler_output)",
            new=(
                "model_output = self.executor.execute_model(scheduler_output)\n"
                "if model_output is None:\n"
                "    self.executor.sample_tokens(None)\n"
            ),
        ),
    ),
), __name__)
