"""``Scheduler(...)`` requires ``block_size``.

vLLM 0.11.1 (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.__init__``) added the required
parameter ``block_size``; speculators 0.3.0 does not pass it and fails with
``TypeError: Scheduler.__init__() missing 1 required positional argument: 'block_size'``.
This patch does what upstream did for 0.4.0 (commit e854faf1): pass ``VLLM_BLOCK_SIZE``.
(``speculators.worker_block_size`` then replaces the hard-coded size by the resolved one.)

vLLM 0.20.0 added ``hash_block_size=None``; it is optional and defaults to ``block_size``,
which is right for the single KV-cache group the generator builds, so it is not passed.
"""

from vllm_compat.catalog.patch import AddKeyword, Patch, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.scheduler_block_size",
    title="pass block_size to Scheduler",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.11.1"},
    why="Scheduler.__init__ requires block_size from vLLM 0.11.1 on (TypeError without it).",
    upstream="vLLM 0.11.1: vllm/v1/core/sched/scheduler.py Scheduler.__init__ gains required "
             "block_size (0.20.0 adds optional hash_block_size).",
    remove_when="drop with speculators 0.3.x support (0.4.0 passes block_size).",
    edits=(
        AddKeyword(
            GENERATOR, "VllmHiddenStatesGenerator.__init__",
            call="Scheduler", keyword="block_size", value="VLLM_BLOCK_SIZE",
        ),
    ),
), __name__)
