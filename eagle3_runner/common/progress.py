"""Progress bars (tqdm) on the terminal (:func:`.console.terminal`, which a quiet step's log does
not swallow): live on a terminal, an occasional line when output is a file or pipe."""

from __future__ import annotations

from typing import Any

from .console import terminal


def bar(total: int | None, desc: str, unit: str, **kw: Any) -> Any:
    from tqdm.auto import tqdm

    out = terminal()
    tty = out.isatty()
    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, mininterval=0.5 if tty else 30.0, file=out,
                **kw)
