"""PyTorch-profiler window for ``benchmarks/gpu_train.py``: where a training step's time goes.

Device time is grouped by kind of kernel (matrix products, FlexAttention, the optimizer, copies,
compiled fused kernels, other element-wise work); host time by the regions that matter for the
loop (waiting for the next batch, the optimizer step, the backward call).  All per profiled step.
"""

from __future__ import annotations

from typing import Any

KINDS = (  # first match wins; names are lower-cased kernel names
    ("attention", ("flex_attention", "flash", "fmha", "sdpa", "attention")),
    ("gemm", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "_mm_", "mm_kernel", "triton_tem_fused_mm", "matmul")),
    ("optimizer", ("adam", "multi_tensor_apply")),
    ("copy_h2d", ("memcpy htod",)),
    ("copy_other", ("memcpy", "memset")),
    ("compiled_fused", ("triton_",)),
)
HOST = {  # host regions (record_function / op names, lower-cased, substring)
    "dataloader_next": "enumerate(dataloader)",
    "optimizer_step": "optimizer.step",
    "backward": "autograd::engine::evaluate_function",
    "compiled_region": "torch-compiled region",
}


def make_profiler(start: int, steps: int, device: str, on_ready: Any = None) -> Any:
    """A profiler that records steps ``start .. start + steps - 1`` (``prof.step()`` per step)
    and calls ``on_ready(prof)`` when they are done."""
    if steps <= 0:
        return None
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    return profile(activities=acts, schedule=schedule(wait=max(0, start - 1), warmup=1, active=steps, repeat=1),
                   on_trace_ready=on_ready)


def kind_of(name: str) -> str:
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other_kernels"


def summarize(prof: Any, device: str) -> dict:
    """Per-step milliseconds by kernel kind (device) and host region, and the top of the table."""
    from torch.autograd import DeviceType

    events = prof.key_averages()
    steps = max(1, _active_steps(prof))
    by_kind: dict[str, float] = {}
    host: dict[str, float] = {}
    for e in events:
        dev_us = getattr(e, "self_device_time_total", 0)
        if e.device_type == DeviceType.CUDA and dev_us:
            kind = kind_of(e.key)
            by_kind[kind] = by_kind.get(kind, 0.0) + dev_us / 1e3 / steps
        low = e.key.lower()
        for region, key in HOST.items():
            if key in low:
                host[region] = host.get(region, 0.0) + e.cpu_time_total / 1e3 / steps
    sort = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    try:
        body = events.table(sort_by=sort, row_limit=60, max_name_column_width=90)
    except Exception:  # noqa: BLE001 - older/newer torch names the column differently
        body = events.table(sort_by="self_cpu_time_total", row_limit=60, max_name_column_width=90)
    by_kind["device_total"] = sum(by_kind.values())
    return {"steps": steps, "by_kind": {k: round(v, 3) for k, v in by_kind.items()},
            "host": {k: round(v, 3) for k, v in host.items()}, "table": body[:24000]}


def _active_steps(prof: Any) -> int:
    n = 0
    for step in range(1000):
        action = prof.schedule(step)
        if action.name in ("RECORD", "RECORD_AND_SAVE"):
            n += 1
    return n
