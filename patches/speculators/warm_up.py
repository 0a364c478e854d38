"""``initialize_from_config`` no longer warms the model up: call ``compile_or_warm_up_model``.

Until vLLM 0.26 ``Executor.initialize_from_config`` ran ``compile_or_warm_up_model`` on the
workers itself; from vLLM 0.27.0 (``vllm/v1/executor/abstract.py``) it only initializes the KV
cache, and the engine core calls the new ``Executor.compile_or_warm_up_model()`` separately
(``vllm/v1/engine/core.py``).  The generator builds its engine by hand, so it must make that
call too, right after ``initialize_from_config`` (as the engine core does).
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.warm_up",
    title="call executor.compile_or_warm_up_model() after initialize_from_config",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    requires={"vllm": ">=0.27.0"},
    why="From vLLM 0.27.0 initialize_from_config skips the warm-up the engine core now runs "
        "separately.",
    upstream="vLLM 0.27.0: vllm/v1/executor/abstract.py Executor.compile_or_warm_up_model; "
             "initialize_from_config no longer calls it.",
    remove_when="speculators builds its engine with vLLM's engine core.",
    edits=(
        InsertAfter(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            after="self.executor.initialize_from_config(kv_cache_configs)",
            new="self.executor.compile_or_warm_up_model()",
        ),
    ),
), __name__)
