"""The learnable tiny verifier, built once per machine and recipe, then copied.

Training it takes about two minutes on 2 cores (more on a loaded machine), and every
``eagle3 run --tiny`` in a new work folder would pay that again for the same weights: the build
is seeded and depends only on its recipe and on the code that makes it.  So it is kept in the
user's cache (``$EAGLE3_CACHE_DIR``, else ``$XDG_CACHE_HOME/eagle3_runner``, else
``~/.cache/eagle3_runner``) under a key hashed from both, and a change to either builds anew.
An entry appears atomically (built in a scratch folder, then renamed), so concurrent runs never
see half of one; where the cache cannot be written, the verifier is built in place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..common.console import milestone

logger = logging.getLogger(__name__)

_SOURCES = ("__init__.py", "arch.py", "verifier.py")  # the code that decides the weights


def cache_root() -> Path:
    if os.environ.get("EAGLE3_CACHE_DIR"):
        return Path(os.environ["EAGLE3_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "eagle3_runner"


def recipe_key(recipe: dict[str, Any]) -> str:
    """A hash of the recipe and of the tiny builder's source files."""
    h = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
    here = Path(__file__).parent
    for name in _SOURCES:
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


def cached_build(dest: Path, recipe: dict[str, Any], build: Callable[[Path], Any],
                 is_built: Callable[[Path], bool]) -> bool:
    """``dest`` gets the folder ``build(folder)`` makes for ``recipe``: copied from the cache
    when an entry exists, else built into the cache first.  Returns whether it came from the cache."""
    dest = Path(dest)
    entry = cache_root() / "tiny" / f"{recipe.get('arch', 'model')}-{recipe_key(recipe)}"
    if is_built(entry):
        _copy(entry, dest)
        milestone(logger, "tiny verifier: copied from the cache (%s)", entry)
        return True
    scratch = entry.with_name(f"{entry.name}.building-{os.getpid()}")
    try:
        scratch.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
    except OSError as exc:
        logger.warning("tiny verifier: the cache %s cannot be written (%s): building in %s", entry.parent, exc, dest)
        build(dest)
        return False
    try:
        build(scratch)
        try:
            scratch.rename(entry)
        except OSError:  # another run finished the same entry first: theirs is as good
            pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _copy(entry, dest)
    return False


def _copy(src: Path, dest: Path) -> None:
    """A whole copy in a sibling, then renamed: ``dest`` is complete or absent."""
    tmp = dest.with_name(f"{dest.name}.copying-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
