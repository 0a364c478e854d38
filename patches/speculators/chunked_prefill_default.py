"""Chunked prefill is on by default: do not abort a request after its first chunk.

vLLM 0.11.1 made ``SchedulerConfig.enable_chunked_prefill`` default to ``True``
(``vllm/config/scheduler.py``).  speculators 0.3.0 aborts every request scheduled in a step
right after that step, so a prompt whose prefill was split (a batch larger than
``max_num_batched_tokens``) loses its remaining chunks: its hidden states are silently
truncated (upstream acknowledged and fixed it after 0.3.0 in commit 9462f99e).  Fix: abort a
request only once its whole prompt has been computed (``Scheduler.schedule`` has already
advanced ``num_computed_tokens`` when it returns); the loop keeps scheduling the remaining
chunks.  Per-request attribution across chunks: ``speculators.capture_hooks`` and
``speculators.request_attribution``.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"

register(Patch(
    id="speculators.chunked_prefill_default",
    title="abort requests only after their whole prompt was prefilled (0.3.0)",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    requires={"vllm": ">=0.11.1"},
    why="With chunked prefill on by default, 0.3.0 aborts a split prompt after its first "
        "chunk and silently truncates its hidden states.",
    upstream="vLLM 0.11.1: vllm/config/scheduler.py SchedulerConfig.enable_chunked_prefill "
             "defaults to True (was None).",
    remove_when="drop with speculators 0.3.x support (0.4.0 tracks prefill progress).",
    edits=(
        ReplaceStmt(
            GENERATOR, "VllmHiddenStatesGenerator.generate",
            old=(
                "for req_id in scheduler_output.num_scheduled_tokens:\n"
                "    self.scheduler.finish_requests([req_id], RequestStatus.FINISHED_ABORTED)\n"
            ),
            new=(
                "for req_id in scheduler_output.num_scheduled_tokens:\n"
                "    request = self.scheduler.requests[req_id]\n"
                "    if request.num_computed_tokens >= request.num_prompt_tokens:\n"
                "        self.scheduler.finish_requests(\n"
                "            [req_id], RequestStatus.FINISHED_ABORTED\n"
                "        )\n"
            ),
        ),
    ),
), __name__)
