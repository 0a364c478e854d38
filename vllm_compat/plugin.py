"""The ``vllm.general_plugins`` entry point: a hash-only check in every vLLM process.

Wheels cannot run install hooks and ``.pth`` start-up hooks are a supply-chain red flag, so
the reminder after ``pip install -U vllm`` (or speculators) comes from vLLM itself: it loads
general plugins at start in every process.  The check finds where speculators is installed
(without importing it), and when its managed files are pending, stale or drifted logs a
warning naming ``vllm-compat apply``, and when an advisory matches (a known-bad combination,
speculators 0.5-0.9's server path among them) names it and its fix.  ``VLLM_COMPAT_STRICT=1``
turns the warning into an error; ``VLLM_COMPAT_PLUGIN=0`` disables the check.
"""

from __future__ import annotations

import importlib.util
import logging
import os

log = logging.getLogger("vllm_compat")
_done = False


def _speculators_site() -> str | None:
    spec = importlib.util.find_spec("speculators")  # locates, does not import
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.dirname(list(spec.submodule_search_locations)[0])


def problem(site: str) -> str | None:
    """A one-line description of what is wrong with the patch state of ``site``, or None."""
    from .fast import verified  # noqa: PLC0415

    if verified(site) is not None:
        return None
    from .api import Exit, status  # noqa: PLC0415 - only when something is off
    from .target import Target  # noqa: PLC0415

    report = status(Target.resolve(site))
    if report.code == Exit.OK:
        return None
    if report.code == Exit.ADVISORY:  # nothing for apply to do: an upgrade is the fix
        return "; ".join(f"vllm-compat: advisory {m.advisory.id} matches {site}: {m.advisory.title}. "
                         f"Fix: {m.advisory.fix}" for m in report.advisories)
    bad = [f"{f.path} ({f.state})" for f in report.files if f.state != "applied"]
    return (f"vllm-compat: speculators patch state is {report.code.name.lower()} in {site}: "
            f"{', '.join(bad) or '; '.join(report.unsupported)}. Run: vllm-compat apply --site-packages {site}")


def register() -> None:
    global _done
    if _done or os.environ.get("VLLM_COMPAT_PLUGIN", "1") == "0":
        return
    _done = True
    site = _speculators_site()
    if site is None:
        return
    try:
        message = problem(site)
    except Exception as exc:  # never break vLLM start-up over the check itself
        log.warning("vllm-compat: could not check the patch state: %s", exc)
        return
    if message is None:
        return
    if os.environ.get("VLLM_COMPAT_STRICT") == "1":
        raise RuntimeError(message)
    log.warning(message)
