"""A small text plot of a loss curve (returned as a string; the CLI prints it)."""

from __future__ import annotations

from collections.abc import Sequence


def loss_plot(losses: Sequence[float], height: int = 8, width: int = 60) -> str:
    if not losses:
        return "(no loss recorded)"
    n = len(losses)
    cols = min(width, n)
    # average the steps falling into each column
    values = []
    for c in range(cols):
        lo, hi = c * n // cols, max((c + 1) * n // cols, c * n // cols + 1)
        chunk = losses[lo:hi]
        values.append(sum(chunk) / len(chunk))
    top, bottom = max(values), min(values)
    span = (top - bottom) or 1.0
    rows = []
    for r in range(height):
        level = top - span * r / max(height - 1, 1)
        line = "".join("*" if abs(v - level) <= span / (2 * max(height - 1, 1)) else " " for v in values)
        rows.append(f"{level:10.4g} |{line}")
    rows.append(" " * 11 + "+" + "-" * cols)
    rows.append(" " * 12 + f"step 1 .. {n}")  # as the training log counts them
    return "\n".join(rows)


def loss_table(losses: Sequence[float], rows: int = 6) -> str:
    """The loss at ``rows`` milestones, the first and the last step included (every step is in
    the checkpoint's loss.jsonl); steps counted from 1, as the training log counts them."""
    n = len(losses)
    steps = sorted({1 + round(i * (n - 1) / max(rows - 1, 1)) for i in range(rows)}) if n else []
    return "\n".join(f"  step {i:4d}  loss {losses[i - 1]:.6f}" for i in steps)
