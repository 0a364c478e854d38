"""Helpers of the engine tests: building sites from real upstream wheels, snapshots, the CLI.

Sites come in two sizes.  A *full* site is ``upstream.build_site`` (speculators unpacked from its
wheel plus every Python source of vLLM and its dist-info).  A *lean* site has the full
speculators but of vLLM only what the engine reads: the dist-info (METADATA, RECORD,
top_level.txt) and the files the catalog's probes look at (derived from the catalog itself, so
new patches with new probes are covered).  The fault-injection loop uses lean sites: they copy
in milliseconds.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

TESTS = Path(__file__).absolute().parent.parent
REPO = TESTS.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import upstream  # noqa: E402

CRASHRUN = Path(__file__).absolute().parent / "crashrun.py"
STATE = ".vllm_compat"
GENERATOR = "speculators/data_generation/vllm_hidden_states_generator.py"


# -- building sites ------------------------------------------------------------------------

def vllm_tree(version: str) -> Path:
    return upstream.source_tree(upstream.vllm_wheel(version))


def dist_info_of(site: Path, prefix: str) -> Path:
    found = [p for p in site.iterdir() if p.name.endswith(".dist-info") and p.name.replace("-", "_").lower().startswith(prefix)]
    assert len(found) == 1, f"expected one {prefix} dist-info in {site}, found {found}"
    return found[0]


def probe_files() -> set[str]:
    """Every file a catalog probe reads that is not owned by speculators."""
    from vllm_compat.catalog.loader import load

    out = set()
    catalog = load()
    for p in catalog.patches:
        for q in (*p.probes, *p.obsolete_if):
            if q.dist != "speculators":
                out.add(q.file)
    for a in catalog.advisories:
        out |= {q.file for q in a.probes if q.dist == "vllm"}
    return out


def add_vllm(site: Path, version: str, lean: bool) -> None:
    tree = vllm_tree(version)
    if not lean:
        shutil.copytree(tree, site, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete"))
        return
    di = next(p for p in tree.iterdir() if p.name.endswith(".dist-info"))
    shutil.copytree(di, site / di.name)
    (site / "vllm").mkdir(exist_ok=True)
    for rel in sorted(probe_files() | {"vllm/__init__.py"}):
        src = tree / rel
        if src.is_file():
            (site / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, site / rel)


def build(site: Path, speculators: str | None = "0.3.0", vllm: str | None = "0.32.0", lean: bool = False) -> Path:
    site.mkdir(parents=True, exist_ok=True)
    if speculators:
        upstream.unpack(upstream.wheel("speculators", speculators), site)
    if vllm:
        add_vllm(site, vllm, lean)
    return site


def copy_site(src: Path, dest: Path, fast: bool = False) -> Path:
    """A copy of ``src`` (``fast``: contents only, not times and modes)."""
    shutil.copytree(src, dest, symlinks=True, copy_function=shutil.copyfile if fast else shutil.copy2)
    return dest


def pip_uninstall(site: Path, dist_info: Path) -> None:
    """Remove what the dist-info's RECORD lists, as ``pip uninstall`` does (then empty dirs)."""
    dirs = set()
    for line in (dist_info / "RECORD").read_text().splitlines():
        rel = line.rsplit(",", 2)[0]
        path = site / rel
        if path.is_file() or path.is_symlink():
            path.unlink()
        # pip also removes the compiled bytecode of each .py it removes
        if rel.endswith(".py"):
            cache = path.parent / "__pycache__"
            if cache.is_dir():
                for pyc in cache.glob(path.stem + ".*.pyc"):
                    pyc.unlink()
        dirs.add(path.parent)
    for d in sorted(dirs | {p for d in dirs for p in d.parents}, key=lambda p: -len(p.parts)):
        if d != site and site in d.parents and d.is_dir():
            for sub in (d / "__pycache__",):
                if sub.is_dir() and not any(sub.iterdir()):
                    sub.rmdir()
            if not any(d.iterdir()):
                d.rmdir()


def upgrade_speculators(site: Path, version: str) -> None:
    pip_uninstall(site, dist_info_of(site, "speculators"))
    upstream.unpack(upstream.wheel("speculators", version), site)


def upgrade_vllm(site: Path, version: str, lean: bool) -> None:
    old = dist_info_of(site, "vllm")
    if lean:
        shutil.rmtree(site / "vllm")
        shutil.rmtree(old)
    else:
        pip_uninstall(site, old)
    add_vllm(site, version, lean)


def make_wheel(folder: Path, name: str, version: str, files: dict[str, bytes], entry_points: str = "") -> Path:
    """A wheel of ``files`` (paths relative to site-packages), with a dist-info that lists
    them in RECORD and, if given, ``entry_points.txt``: what ``pip install`` would unpack."""
    folder.mkdir(parents=True, exist_ok=True)
    di = f"{name}-{version}.dist-info"
    meta = {f"{di}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode(),
            f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: enginekit\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            f"{di}/top_level.txt": ("\n".join(sorted({rel.split("/")[0].removesuffix(".py") for rel in files})) + "\n").encode()}
    if entry_points:
        meta[f"{di}/entry_points.txt"] = entry_points.encode()
    everything = {**files, **meta}
    record = "".join(record_line(rel, data) + "\n" for rel, data in everything.items()) + f"{di}/RECORD,,\n"
    whl = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        for rel, data in everything.items():
            zf.writestr(rel, data)
        zf.writestr(f"{di}/RECORD", record)
    return whl


# -- RECORD and hashes -----------------------------------------------------------------------

def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha_file(path: Path) -> str | None:
    try:
        return sha(path.read_bytes())
    except FileNotFoundError:
        return None


def record(site: Path, prefix: str = "speculators") -> dict[str, str]:
    """``{rel: sha256 hex}`` of the RECORD of the ``prefix`` dist-info (hashed entries only)."""
    out = {}
    for line in (dist_info_of(site, prefix) / "RECORD").read_text().splitlines():
        rel, digest, _ = line.rsplit(",", 2)
        if digest.startswith("sha256="):
            d = digest[7:]
            out[rel] = base64.urlsafe_b64decode(d + "=" * (-len(d) % 4)).hex()
    return out


def record_line(rel: str, data: bytes) -> str:
    d = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{rel},sha256={d},{len(data)}"


def rewrite_record(dist_info: Path, changes: dict[str, bytes], renames: dict[str, str] | None = None) -> None:
    """Make RECORD agree with ``changes`` ({rel: new content}) and path ``renames`` (prefixes)."""
    lines = []
    for line in (dist_info / "RECORD").read_text().splitlines():
        rel = line.rsplit(",", 2)[0]
        new_rel = rel
        for old, new in (renames or {}).items():
            if rel.startswith(old):
                new_rel = new + rel[len(old):]
        if rel in changes:
            lines.append(record_line(new_rel, changes[rel]))
        elif new_rel != rel:
            lines.append(new_rel + line[len(rel):])
        else:
            lines.append(line)
    (dist_info / "RECORD").write_text("\n".join(lines) + "\n")


def all_record_exact(site: Path, prefix: str = "speculators") -> list[str]:
    """Paths of the RECORD that are not RECORD-exact (empty list: all are)."""
    return [rel for rel, want in record(site, prefix).items() if sha_file(site / rel) != want]


# -- snapshots -------------------------------------------------------------------------------

def snapshot(site: Path) -> dict[str, tuple]:
    """Every entry under ``site``: kind, content hash (or link target), mode and mtime_ns."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(site):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(site))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                out[rel] = ("file", sha(path.read_bytes()), st.st_mode, st.st_mtime_ns)
    return out


def snapshot_diff(before: dict, after: dict) -> list[str]:
    out = [f"+ {k}" for k in sorted(set(after) - set(before))]
    out += [f"- {k}" for k in sorted(set(before) - set(after))]
    out += [f"~ {k}: {before[k]} -> {after[k]}" for k in sorted(set(before) & set(after)) if before[k] != after[k]]
    return out


def files(site: Path) -> set[str]:
    return {k for k, v in snapshot(site).items() if v[0] != "dir"}


def dirs(site: Path) -> set[str]:
    return {k for k, v in snapshot(site).items() if v[0] == "dir"}


# -- running the CLI ---------------------------------------------------------------------------

def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_COMPAT_CRASH")}
    e["PYTHONDONTWRITEBYTECODE"] = "1"
    e.update(extra)
    return e


def cli(site: Path | None, *args: str, extra_env: dict[str, str] | None = None, wrapper: bool = False,
        timeout: float = 120, prefix: list[str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m vllm_compat CMD --site-packages SITE ARGS...`` (CMD is ``args[0]``), run in
    the repository or in ``cwd`` (a user's project: its pyproject.toml names catalogs)."""
    cmd = [*(prefix or []), sys.executable]
    cmd += [str(CRASHRUN)] if wrapper else ["-m", "vllm_compat"]
    cmd += [args[0]] + (["--site-packages", str(site)] if site is not None else []) + list(args[1:])
    extra = dict(extra_env or {})
    if cwd is not None:  # this checkout's vllm_compat, wherever the command runs
        extra["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(cwd or REPO), env=env(**extra))


def show(res: subprocess.CompletedProcess) -> str:
    return f"exit {res.returncode}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"


# -- what an uninterrupted apply produces --------------------------------------------------------

class Reference:
    """The managed files of a pristine site and their content after an uninterrupted apply."""

    def __init__(self, pristine: Path, workdir: Path) -> None:
        self.pristine = pristine
        patched = copy_site(pristine, workdir / "patched")
        res = cli(patched, "apply")
        assert res.returncode == 0, show(res)
        import json

        manifest = json.loads((patched / STATE / "manifest.json").read_bytes())
        self.manifest = manifest
        self.patched_site = patched
        self.applied = {rel: rec["applied"] for rel, rec in manifest["files"].items()}
        self.shims = {rel for rel, rec in manifest["files"].items() if rec["shim"]}
        rec = record(pristine)
        self.pristine_sha = {rel: (None if rel in self.shims else rec[rel]) for rel in self.applied}
        assert self.applied, "apply patched nothing on the reference site"
        for rel in self.applied:
            assert self.applied[rel] != self.pristine_sha[rel], f"{rel}: apply left it unchanged"

    def state_of(self, site: Path, rel: str) -> str:
        cur = sha_file(site / rel)
        if cur == self.applied[rel]:
            return "patched"
        if cur == self.pristine_sha[rel]:
            return "pristine"
        return f"MIXED({cur})"

    def states(self, site: Path) -> dict[str, str]:
        return {rel: self.state_of(site, rel) for rel in self.applied}
