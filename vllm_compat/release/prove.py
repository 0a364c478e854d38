"""``vllm-compat prove``: the runtime proof on the user's own machine.

Two paths, as speculators has two.  The *generator* path (speculators 0.3/0.4) runs the patched
stack of the managed site (its vLLM and its patched speculators, imported from that site) with
speculators' own ``VllmHiddenStatesGenerator``; the *server* path (speculators 0.5-0.9, which
have no generator; ``--server`` on any site) starts ``vllm serve`` with the extract_hidden_states
method and vLLM's hidden-states connector as speculators' ``launch_vllm.py`` does and sends the
prompts through speculators' own client (:mod:`.serve_worker`).  Both run on tiny random-weight
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
SERVE_WORKER = Path(__file__).with_name("serve_worker.py")
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"
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

    method: str = "generator"  # or "server"

    def to_dict(self) -> dict:
        return {"exit_code": int(self.code), "result": self.code.name.lower(), "method": self.method,
                "versions": self.versions, "results": self.results, "files": self.files, "date": self.date,
                "proof": self.path, "seconds": round(self.seconds, 1)}


def _refuse_unfit(plan, server: bool = False) -> None:
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
    if pending or not (server or any(f.patches for f in report.files)):  # (the server path needs no patch)
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


def _run_worker(target: Target, arch: str, model: Path, tolerance: float, tmp: Path, server: bool = False,
                connector: str = "") -> dict:
    spec = tmp / f"{arch}.json"
    out = tmp / f"{arch}-result.json"
    module, _, cls = connector.partition(":")
    folder = ""
    if module.endswith(".py"):  # FILE.py:Class: its folder goes on the path
        folder, module = os.path.dirname(os.path.abspath(module)), os.path.basename(module)[:-3]
    spec.write_text(json.dumps({"arch": arch, "model": str(model), "tolerance": tolerance,
                                "site": str(target.site), "out": str(out),
                                "connector": f"{module}:{cls}" if connector else "", "connector_path": folder}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target.site), env.get("PYTHONPATH")]))
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(SERVE_WORKER if server else WORKER), str(spec)], env=env,
                              capture_output=True, text=True, timeout=WORKER_TIMEOUT)
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
    result.setdefault("worst", float("nan"))
    ran = result.get("client" if server else "module", "")  # speculators' code that ran: the site's own
    if result["status"] == "passed" and not os.path.realpath(ran).startswith(os.path.realpath(target.site) + os.sep):
        result |= {"status": "failed", "reason": f"speculators' code ran from {ran}, not from this site"}
    return result


def prove(target: Target, server: bool | None = None, connector: str = "", archs: tuple[str, ...] = ()
          ) -> ProveResult:
    """Run the proof on ``target`` and record it when every runnable architecture matches.

    ``server``: the server path (None: where the site's speculators has no generator);
    ``connector``: the hidden-states connector to prove there (``module:Class`` or
    ``FILE.py:Class``; default vLLM's, and only then is a proof recorded); ``archs``: only these."""
    from ..plan import bound_now, make_plan  # noqa: PLC0415
    from ..proof import write  # noqa: PLC0415
    from .wheels import cache_dir  # noqa: PLC0415

    t0 = time.monotonic()
    plan = make_plan(target)
    if plan.dists.get("speculators") is None:
        raise CommandError(f"speculators is not installed in {target.site}: nothing to prove", Exit.ENV)
    if server is None:
        server = not (target.site / GENERATOR).is_file()
    if connector and (":" not in connector or not server):
        raise CommandError("--connector wants MODULE:CLASS or FILE.py:CLASS, and the server path", Exit.USAGE)
    _refuse_unfit(plan, server)
    _intact(plan)
    versions = dict(plan.report.versions)
    builders, overrides = _models(cache_dir())
    unknown = sorted(set(archs) - set(builders))
    if unknown:
        raise CommandError(f"no tiny model of {', '.join(unknown)} (known: {', '.join(sorted(builders))})", Exit.USAGE)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="vllm-compat-prove-") as tmp:
        for arch, builder in sorted(builders.items()):
            if archs and arch not in archs:
                continue
            model = _build(arch, builder, cache_dir())
            tol = tolerance_for(model, arch, overrides)
            log.info("proving %s on the %s path (tolerance %g)", arch, "server" if server else "generator", tol)
            results[arch] = _run_worker(target, arch, model, tol, Path(tmp), server, connector)
    method = "server" if server else "generator"
    if server:
        _name_causes(results, plan.report.advisories)
    passed = [a for a, r in results.items() if r["status"] == "passed"]
    failed = [a for a, r in results.items() if r["status"] not in ("passed", "skipped")]
    if failed or not passed or connector or archs:  # a proof binds the stack as installed, every model
        code = Exit.PROOF if failed or not passed else Exit.OK
        return ProveResult(code, versions, results, seconds=time.monotonic() - t0, method=method)
    # The files must still be those checked before the run.
    again = make_plan(target)
    _refuse_unfit(again, server)
    bound, _ = bound_now(again, again.report.files)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    from .. import __version__  # noqa: PLC0415

    path = write(str(target.state_dir), bound, date, results,
                 {"versions": versions, "site": str(target.site), "vllm_compat": __version__, "method": method})
    return ProveResult(Exit.OK, versions, results, bound["files"], date, path, time.monotonic() - t0, method)


def _name_causes(results: dict[str, dict], advisories) -> None:
    """An all-zero result names the advisory that explains it (one whose condition holds for
    the model: a hybrid verifier's), or says that none does."""
    for r in results.values():
        if not r.get("zero"):
            continue
        fits = [m.advisory for m in advisories if m.advisory.condition in ("", "hybrid-verifier" if r.get("hybrid") else "")]
        cause = ("; ".join(f"advisory {a.id}: {a.title} (fix: {a.fix})" for a in fits) if fits else
                 "no advisory of the catalogs explains it: the connector wrote all-zero hidden states")
        r["reason"] = f"{cause}; {r['reason']}"
        r["advisories"] = [a.id for a in fits]
