"""Two writers at once serialize on the lock; ``verify``/``status`` stay import-light."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import enginekit as kit
from enginekit import STATE, cli, show


def _runs(trace: Path) -> list[tuple[int, list[str]]]:
    """The trace as consecutive runs of one process: [(pid, [ops...]), ...]."""
    runs: list[tuple[int, list[str]]] = []
    for line in trace.read_text().splitlines():
        pid, op, path, _ = line.split(" ")
        if op == "mkdir" and path.endswith(".vllm_compat"):
            continue  # made before taking the lock (the lock file lives in it): not a locked write
        if runs and runs[-1][0] == int(pid):
            runs[-1][1].append(f"{op} {path}")
        else:
            runs.append((int(pid), [f"{op} {path}"]))
    return runs


def _start(site: Path, trace: Path, *args: str, slow: str = "0.02") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(kit.CRASHRUN), args[0], "--site-packages", str(site), *args[1:]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(kit.REPO),
        env=kit.env(VLLM_COMPAT_TRACE=str(trace), VLLM_COMPAT_SLOW=slow))


def _run_at_once(site: Path, trace: Path, *commands: str, slow: str = "0.02") -> tuple[list, list]:
    """Start ``commands`` together; each must succeed and no two may interleave their writes.
    Returns their (stdout, stderr) and the trace's runs."""
    procs = [_start(site, trace, c, slow=slow) for c in commands]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{err}"
    runs = _runs(trace)
    pids = [pid for pid, _ in runs]
    assert len(pids) == len(set(pids)), "writers interleaved:\n" + "\n".join(
        f"{pid}: {ops[0]} ... ({len(ops)} ops)" for pid, ops in runs)
    return outs, runs


def _wait_for_writes(trace: Path, pid: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trace.exists() and any(line.startswith(f"{pid} ") for line in trace.read_text().splitlines()):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never wrote")


def test_two_applies_at_once_serialize(site: Path, tmp_path: Path) -> None:
    outs, runs = _run_at_once(site, tmp_path / "trace", "apply", "apply")
    # exactly one of them patched; the other waited and found nothing to do
    said = sorted("nothing to do" in out for out, _ in outs)
    assert said == [False, True], outs
    journals = [op for _, ops in runs for op in ops if op.startswith("atomic_write") and op.endswith("journal.json")]
    assert len(journals) == 1, journals
    ver = cli(site, "verify")
    assert ver.returncode == 0, show(ver)
    assert not (site / STATE / "journal.json").exists()


def test_revert_racing_apply_serialize(patched: Path, tmp_path: Path) -> None:
    """revert removes the state folder (and its lock file) while others wait on that lock."""
    site = patched
    _run_at_once(site, tmp_path / "trace", "revert", "apply", "apply", slow="0.01")
    ver = cli(site, "verify")
    assert ver.returncode in (0, 10), show(ver)


def test_lock_survives_revert_removing_it(patched: Path, tmp_path: Path) -> None:
    """A waiter that held the lock file revert deleted must not run beside a newcomer that
    created a fresh one: revert (A) holds the lock, apply (B) waits on it; once A is gone and
    B writes, apply (C) starts.  B and C must not interleave."""
    site = patched
    trace = tmp_path / "trace"
    a = _start(site, trace, "revert", slow="0.05")
    _wait_for_writes(trace, a.pid)
    b = _start(site, trace, "apply", slow="0.1")
    time.sleep(1.0)  # B is started and blocked on A's lock
    a_out = a.communicate(timeout=300)
    assert a.returncode == 0, a_out
    _wait_for_writes(trace, b.pid)
    c = _start(site, trace, "apply", slow="0.1")
    outs = [b.communicate(timeout=300), c.communicate(timeout=300)]
    for p, (out, err) in zip((b, c), outs):
        assert p.returncode == 0, f"exit {p.returncode}\n{out}\n{err}"
    pids = [pid for pid, _ in _runs(trace)]
    assert len(pids) == len(set(pids)), "writers interleaved after revert removed the lock: " + " ".join(map(str, pids))
    ver = cli(site, "verify")
    assert ver.returncode == 0, show(ver)


def _imported(stderr: str) -> set[str]:
    mods = set()
    for line in stderr.splitlines():
        m = re.match(r"import time:\s+\d+\s+\|\s+\d+\s+\|\s+(\S+)", line)
        if m:
            mods.add(m.group(1).strip())
    return mods


def _heavy(mods: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in mods if any(m == n or m.startswith(n + ".") for n in names)}


def test_verify_fast_path_imports_nothing_heavy(patched: Path) -> None:
    site = patched
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_compat", "verify", "--site-packages", str(site)],
                         capture_output=True, text=True, cwd=str(kit.REPO), env=kit.env())
    assert res.returncode == 0, show(res)
    mods = _imported(res.stderr)
    assert "vllm_compat.fast" in mods, sorted(mods)  # the trace is real
    bad = _heavy(mods, ("libcst", "importlib.metadata", "packaging", "torch", "vllm", "speculators"))
    assert not bad, f"verify imported {sorted(bad)}"


def test_status_imports_no_libcst(site: Path) -> None:
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_compat", "status", "--site-packages", str(site)],
                         capture_output=True, text=True, cwd=str(kit.REPO), env=kit.env())
    assert res.returncode == 10, show(res)
    mods = _imported(res.stderr)
    assert "vllm_compat.catalog.loader" in mods, sorted(mods)
    bad = _heavy(mods, ("libcst", "torch", "vllm", "speculators"))
    assert not bad, f"status imported {sorted(bad)}"

def test_status_on_a_patched_site_imports_no_libcst(patched: Path) -> None:
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_compat", "status", "--site-packages", str(patched)],
                         capture_output=True, text=True, cwd=str(kit.REPO), env=kit.env())
    assert res.returncode == 0, show(res)
    bad = _heavy(_imported(res.stderr), ("libcst", "torch", "vllm", "speculators"))
    assert not bad, f"status imported {sorted(bad)}"


def test_verify_with_two_user_catalogs_stays_on_the_fast_path(patched: Path, tmp_path: Path) -> None:
    """One catalog named by the project's pyproject.toml, one installed with an entry point:
    verify still answers from hashes alone (neither the catalog loader nor tomllib runs)."""
    from test_catalogs_hostile import KEYWORD, patch_module

    before = cli(patched, "verify")
    built_in = int(before.stdout.split("ok: ", 1)[1].split(" ", 1)[0])  # the built-in catalog's count
    repo = tmp_path / "repo"
    (repo / "fixes").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[tool.vllm-compat]\ncatalogs = ["fixes"]\n')
    (repo / "fixes" / "kw.py").write_text(patch_module("speculators.kw", KEYWORD))
    seqs = ("ReplaceStmt('speculators/data_generation/vllm_hidden_states_generator.py', '', "
            "old='MAX_NUM_SEQS = 32', new='MAX_NUM_SEQS = 64')")
    text = patch_module("speculators.seqs", seqs).replace("import AddKeyword,", "import AddKeyword, ReplaceStmt,")
    whl = kit.make_wheel(tmp_path / "wheels", "teamfixes", "1.0", {"teamfixes/__init__.py": b"",
                         "teamfixes/catalog/seqs.py": text.encode()}, "[vllm_compat.catalogs]\nteam = teamfixes.catalog\n")
    kit.upstream.unpack(whl, patched)
    res = cli(patched, "apply", cwd=repo)
    assert res.returncode == 0, show(res)
    gen = (patched / kit.GENERATOR).read_text()
    assert "exc_info=True" in gen and "MAX_NUM_SEQS = 64" in gen
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "vllm_compat", "verify", "--site-packages", str(patched)],
                         capture_output=True, text=True, cwd=str(repo), env=kit.env(PYTHONPATH=str(kit.REPO)))
    assert res.returncode == 0 and res.stdout.startswith(f"ok: {built_in + 2} patch(es)"), show(res)
    mods = _imported(res.stderr)
    assert "vllm_compat.catalog.sources" in mods, sorted(mods)
    bad = _heavy(mods, ("libcst", "importlib.metadata", "packaging", "torch", "vllm", "speculators", "tomllib",
                        "vllm_compat.catalog.loader", "vllm_compat.plan", "dataclasses"))
    assert not bad, f"verify imported {sorted(bad)}"
