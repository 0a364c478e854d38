"""Progress bars (tqdm): live on a terminal, an occasional line when output is a file or pipe."""

from __future__ import annotations

import sys
from typing import Any


def bar(total: int | None, desc: str, unit: str, **kw: Any) -> Any:
    from tqdm.auto import tqdm

    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, mininterval=0.5 if tty else 30.0, **kw)
