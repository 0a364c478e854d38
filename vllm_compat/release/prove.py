"""``vllm-compat prove``: the runtime proof on the user's own machine.

It runs the patched stack of the managed site (its vLLM and its patched speculators, imported
from that site) with speculators' own ``VllmHiddenStatesGenerator`` on tiny random-weight
models built offline (every architecture a ``vllm_compat.tiny_models`` entry point registers,
``eagle3_runner.tiny`` among them, that the installed vLLM can run), compares the hidden states with HF transformers' for the same
tokens and layer ids, and on success records a proof (:mod:`.proof`) bound to exactly these
files.  ``status`` and ``apply`` then accept versions outside the shipped range.

Before anything runs it refuses a site that is not fully applied: hand-edited patched files are
named (exit 11), and so are files of the distributions that differ from their RECORD.  Each
architecture runs in its own subprocess (:mod:`.prove_worker`); torch, transformers and vLLM are
only imported there, and by the tiny-model builders.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..report import CommandError, Exit
from ..state import DRIFTED, PENDING, STALE
from ..target import Target, sha256_file

__all__ = ["ProveResult", "prove", "tolerance_for"]

log = logging.getLogger(__name__)
WORKER = Path(__file__).with_name("prove_worker.py")
WORKER_TIMEOUT = 900  # seconds per architecture
# ‖vLLM − HF‖/‖HF‖ allowed, by the dtype the tiny model is saved in (vLLM runs dtype="auto":
# bf16 on the CPU; the reference is HF in float32).  The e2e tests use the same bounds.
TOLERANCE_BY_DTYPE = {"float32": 2e-2, "bfloat16": 5e-2, "float16": 5e-2}


@dataclass(frozen=True)
class ProveResult:
    code: Exit
    versions: dict[str, str]
    results: dict[str, dict]  # architecture -> what its worker found
    files: dict[str, str] = field(default_factory=dict)  # bound files -> sha256
    date: str = ""
    path: str = ""  # the proof written ("" when none was)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"exit_code": int(self.code), "result": self.code.name.lower(), "versions": self.versions,
                "results": self.results, "files": self.files, "date": self.date, "proof": self.path,
                "seconds": round(self.seconds, 1)}


def _refuse_unfit(plan) -> None:
    report = plan.report
    drifted = [f"{f.path} ({f.detail})" if f.detail else f.path for f in report.files if f.state == DRIFTED]
    if drifted:
        raise CommandError("patched files were edited by hand, so they are not what the catalog proves: "
                           + ", ".join(drifted) + " (vllm-compat diff shows the edits; keep them with "
                           "`vllm-compat record NAME`, or discard them with revert --force and apply)", Exit.DRIFTED)
    stale = sorted({f.detail for f in report.files if f.state == STALE})
    if stale:
        raise CommandError("installed distributions changed since apply (" + "; ".join(stale) + "): "
                           "run vllm-compat apply first", Exit.STALE)
    pending = [f.path for f in report.files if f.state == PENDING]
    if pending or not any(f.patches for f in report.files):
        raise CommandError("the site is not patched (pending: " + (", ".join(pending) or "everything")
                           + "): run vllm-compat apply (--allow-unsupported outside the proven range) first",
                           Exit.PENDING)


def _intact(plan) -> None:
    """Every RECORD-listed file of the distributions the catalogs look at is the wheel's
    (except the managed ones): the proof binds the RECORD hashes, so they must hold now."""
    managed = {f.path for f in plan.report.files}
    bad = []
    for pkg, dist in sorted(plan.dists.items()):
        if dist is None:
            continue
        for rel, want in dist.record.items():
            if rel in managed or rel.endswith(".pyc") or rel.startswith(("../", "/")):  # (scripts: not imported)
                continue
            try:
                got = sha256_file(plan.target.site / rel)
            except OSError as exc:
                got = f"unreadable: {exc}"
            if got != want:
                bad.append(f"{rel} ({'missing' if got is None else 'differs from RECORD'})")
    if bad:
        raise CommandError(f"{len(bad)} installed file(s) are not the wheel's, so the proof could not be bound "
                           "to them: " + ", ".join(bad[:10]) + (" ..." if len(bad) > 10 else ""), Exit.DRIFTED)


def tolerance_for(model_dir: Path, arch: str, overrides: dict[str, float]) -> float:
    if arch in overrides:
        return overrides[arch]
    cfg = json.loads((model_dir / "config.json").read_text())
    dtype = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32")
    return TOLERANCE_BY_DTYPE.get(dtype, 5e-2)


MODELS_GROUP = "vllm_compat.tiny_models"  # entry points: modules with BUILDERS (and TOLERANCE)


def _registries() -> list:
    """The tiny-model registries installed (``eagle3_runner.tiny`` registers itself through
    ``pyproject.toml``): the engine finds them as it finds catalogs, by entry point, so it never
    imports the runner that imports it."""
    from importlib.metadata import entry_points  # noqa: PLC0415

    try:
        return [ep.load() for ep in entry_points(group=MODELS_GROUP)]
    except ImportError as exc:
        raise CommandError(f"prove needs the tiny-model builders (with torch and transformers): {exc}",
                           Exit.ENV) from exc


def _models(cache: Path) -> tuple[dict, dict[str, float]]:
    """``{arch: builder}`` of the tiny-model registries and their per-architecture tolerances."""
    builders: dict = {}
    tolerances: dict[str, float] = {}
    for registry in _registries():
        builders.update(getattr(registry, "BUILDERS", {}))
        tolerances.update(getattr(registry, "TOLERANCE", {}))
    if not builders:
        raise CommandError(f"prove: no tiny-model builders are installed (entry point group {MODELS_GROUP})", Exit.ENV)
    return builders, tolerances


def _build(arch: str, builder, cache: Path) -> Path:  # noqa: ANN001
    """The tiny model of ``arch``, built once per version of its builder's module (cached)."""
    module = sys.modules[builder.__module__]
    key = hashlib.sha256(Path(module.__file__).read_bytes()).hexdigest()[:12]
    dest = cache / "prove-models" / f"{arch}-{key}"
    if not (dest / ".complete").exists():
        log.info("building the tiny %s model in %s", arch, dest)
        builder(dest, seed=0)
        (dest / ".complete").write_text("")
    return dest


def _run_worker(target: Target, arch: str, model: Path, tolerance: float, tmp: Path) -> dict:
    spec = tmp / f"{arch}.json"
    out = tmp / f"{arch}-result.json"
    spec.write_text(json.dumps({"arch": arch, "model": str(model), "tolerance": tolerance,
                                "site": str(target.site), "out": str(out)}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target.site), env.get("PYTHONPATH")]))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(WORKER), str(spec)], env=env, capture_output=True, text=True,
                              timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"timed out after {WORKER_TIMEOUT} s", "seconds": WORKER_TIMEOUT,
                "worst": float("nan"), "tolerance": tolerance, "cases": 0}
    seconds = time.monotonic() - t0
    if proc.returncode != 0 or not out.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
        log.error("prove worker for %s failed (exit %s):\n%s", arch, proc.returncode, "\n".join(tail))
        return {"status": "failed", "reason": f"the generator failed (exit {proc.returncode}): "
                + (tail[-1] if tail else "no output"), "seconds": seconds, "worst": float("nan"),
                "tolerance": tolerance, "cases": 0}
    result = json.loads(out.read_text())
    result["seconds"] = round(seconds, 1)
    if result["status"] == "passed" and not os.path.realpath(result.get("module", "")).startswith(
            os.path.realpath(target.site) + os.sep):
        result |= {"status": "failed", "reason": f"the generator ran from {result.get('module')}, not from this site"}
    return result


def prove(target: Target) -> ProveResult:
    """Run the proof on ``target`` and record it when every runnable architecture matches."""
    from ..plan import bound_now, make_plan  # noqa: PLC0415
    from ..proof import write  # noqa: PLC0415
    from .wheels import cache_dir  # noqa: PLC0415

    t0 = time.monotonic()
    plan = make_plan(target)
    _refuse_unfit(plan)
    _intact(plan)
    versions = dict(plan.report.versions)
    builders, overrides = _models(cache_dir())
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-compat-prove-") as tmp:
        for arch, builder in sorted(builders.items()):
            model = _build(arch, builder, cache_dir())
            tol = tolerance_for(model, arch, overrides)
            log.info("proving %s (tolerance %g)", arch, tol)
            results[arch] = _run_worker(target, arch, model, tol, Path(tmp))
    passed = [a for a, r in results.items() if r["status"] == "passed"]
    failed = [a for a, r in results.items() if r["status"] not in ("passed", "skipped")]
    if failed or not passed:
        return ProveResult(Exit.PROOF, versions, results, seconds=time.monotonic() - t0)
    # The files must still be those checked before the run.
    again = make_plan(target)
    _refuse_unfit(again)
    bound, _ = bound_now(again, again.report.files)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    from .. import __version__  # noqa: PLC0415

    path = write(str(target.state_dir), bound, date, results,
                 {"versions": versions, "site": str(target.site), "vllm_compat": __version__})
    return ProveResult(Exit.OK, versions, results, bound["files"], date, path, time.monotonic() - t0)
