"""Fault injection: ``apply`` and ``revert`` SIGKILLed at every write operation.

The write operations are hooked by ``crashrun.py`` (test-only monkeypatching of
``store.atomic_write``, ``os.replace``, ``os.unlink``, ``os.rmdir``, ``os.mkdir`` and
``shutil.rmtree``); the process is killed right before or right after the N-th one, for every N
until a run completes.  After each crash the next commands a user would run (``status``, then
``apply``/``revert`` and ``verify``) must recover: every managed file ends up entirely pristine or
entirely patched (all files in the same state), no pristine byte is ever lost, and the final
``verify`` passes.

The crashing runs are forked from the test process (libcst already imported), which keeps a crash
point at a few milliseconds; ``test_crash_through_the_env_var`` drives the same hooks through a
real ``python crashrun.py`` subprocess and the ``VLLM_COMPAT_CRASH_AT`` variable.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

import crashrun
import enginekit as kit
from enginekit import STATE, cli, show

from vllm_compat.entry import main as entry_main
from vllm_compat.store import Store
from vllm_compat.target import Target


@pytest.fixture
def fast_writes(monkeypatch):
    """Make one crash point cheap: no fsync (a SIGKILL loses nothing the page cache holds; fsync
    only matters for power loss) and libcst transforms memoized (pure functions of the source
    and the patches: the writes under test are unchanged).  Forked children inherit both."""
    from vllm_compat import transform

    crashrun.fresh_catalog()
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    memo: dict = {}
    real = transform.transform_file

    def transform_file(rel, source, patches):
        key = (rel, source, tuple(p.id for p in patches))
        if key not in memo:
            memo[key] = real(rel, source, patches)
        return memo[key]

    monkeypatch.setattr(transform, "transform_file", transform_file)


def run(site: Path, *args: str) -> tuple[int, str, str]:
    """One CLI command in-process (the same code path as ``python -m vllm_compat``)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = entry_main([args[0], "--site-packages", str(site), *args[1:]])
    return code, out.getvalue(), err.getvalue()


def no_pristine_byte_lost(ref: kit.Reference, site: Path, where: str) -> None:
    for rel, want in ref.pristine_sha.items():
        if want is None:
            continue
        held = {kit.sha_file(site / rel), kit.sha_file(site / STATE / "backup" / rel)}
        assert want in held, f"{where}: pristine {rel} is neither in the file nor in a backup"


def recover(site: Path) -> None:
    store = Store(Target(site))
    if store.dir.exists():
        with store.locked():
            store.recover()


def uniform(ref: kit.Reference, site: Path, where: str) -> str:
    states = ref.states(site)
    kinds = set(states.values())
    assert len(kinds) == 1 and kinds <= {"pristine", "patched"}, f"{where}: files in mixed states {states}"
    return kinds.pop()


def crash_loop(ref: kit.Reference, start: Path, work: Path, command: str) -> int:
    """Crash ``command`` at every write point; return how many crash points were exercised."""
    probe = kit.copy_site(start, work / "probe")
    killed, _, total = crashrun.run_forked([command, "--site-packages", str(probe)], 0, "before")
    assert not killed and total > 0
    shutil.rmtree(probe)
    crashes = 0
    pristine_files = kit.files(ref.pristine)
    for when in ("before", "after"):
        n = 0
        while True:
            n += 1
            site = kit.copy_site(start, work / f"{command}-{when}-{n}", fast=True)
            where = f"{command} killed {when} write #{n}"
            killed, _, _ = crashrun.run_forked([command, "--site-packages", str(site)], n, when)
            if not killed:
                assert n > total or when == "after", f"{where}: ran to the end before write #{total}"
                if n > total:
                    break
            else:
                crashes += 1
            no_pristine_byte_lost(ref, site, where)
            # what a user runs next: status must explain, not crash
            code, out, err = run(site, "status")
            # an interrupted run is pending work for the next apply/revert, never "hand edits"
            assert code in (0, 10), f"{where}: status exit {code}\n{out}\n{err}"
            assert "Traceback" not in err, err
            code, out, err = run(site, "verify")
            assert code in (0, 10), f"{where}: verify exit {code}\n{out}\n{err}"
            no_pristine_byte_lost(ref, site, where + " (after status)")
            # the next writing command completes or drops the interrupted run first
            recover(site)
            state = uniform(ref, site, where + " (after recovery)")
            no_pristine_byte_lost(ref, site, where + " (after recovery)")
            code, out, err = run(site, "verify")
            if state == "patched" and command == "apply":
                assert code == 0, f"{where}: recovered to patched but verify says {code}\n{out}{err}"
            if command == "apply":
                code, out, err = run(site, "apply")
                assert code == 0, f"{where}: apply after the crash: exit {code}\n{out}{err}"
                assert uniform(ref, site, where + " (after apply)") == "patched"
                code, out, err = run(site, "verify")
                assert code == 0, f"{where}: verify after apply: exit {code}\n{out}{err}"
                manifest = json.loads((site / STATE / "manifest.json").read_bytes())
                assert {r: e["applied"] for r, e in manifest["files"].items()} == ref.applied
                assert not (site / STATE / "journal.json").exists()
                assert not (site / STATE / "staging").exists()
            else:
                code, out, err = run(site, "revert")
                assert code == 0, f"{where}: revert after the crash: exit {code}\n{out}{err}"
                assert uniform(ref, site, where + " (after revert)") == "pristine"
                assert not kit.all_record_exact(site), where
                assert not (site / STATE).exists(), f"{where}: state folder left behind"
                assert kit.files(site) == pristine_files, f"{where}: file list differs from pristine"
                code, out, err = run(site, "verify")
                assert code == 10, f"{where}: verify on the reverted site: exit {code}\n{out}{err}"
            shutil.rmtree(site)
    return crashes


def test_apply_survives_sigkill_at_every_write(reference: kit.Reference, tmp_path: Path, fast_writes) -> None:
    crashes = crash_loop(reference, reference.pristine, tmp_path, "apply")
    print(f"apply: {crashes} crash points exercised over {len(reference.applied)} managed files")
    assert crashes > 5


def test_revert_survives_sigkill_at_every_write(reference: kit.Reference, tmp_path: Path, fast_writes) -> None:
    crashes = crash_loop(reference, reference.patched_site, tmp_path, "revert")
    print(f"revert: {crashes} crash points exercised over {len(reference.applied)} managed files")
    assert crashes > 5


def test_crash_through_the_env_var(reference: kit.Reference, tmp_path: Path) -> None:
    """The subprocess path: ``VLLM_COMPAT_CRASH_AT`` kills a real ``python`` run mid-apply,
    after the commit point (the journal is written, not every file is)."""
    site = kit.copy_site(reference.pristine, tmp_path / "site")
    trace = tmp_path / "trace"
    res = cli(site, "apply", wrapper=True, extra_env={"VLLM_COMPAT_TRACE": str(trace)})
    assert res.returncode == 0, show(res)
    ops = trace.read_text().splitlines()
    # the first write of a managed file (after the journal, the commit point)
    first = next(i for i, line in enumerate(ops, 1)
                 if line.split()[1] == "atomic_write" and not f"/{STATE}/" in line)
    assert any("journal.json" in line for line in ops[:first])
    site = kit.copy_site(reference.pristine, tmp_path / "site2")
    res = cli(site, "apply", wrapper=True,
              extra_env={"VLLM_COMPAT_CRASH_AT": str(first + 2), "VLLM_COMPAT_CRASH_WHEN": "after"})
    assert res.returncode == -9, show(res)
    assert (site / STATE / "journal.json").exists()
    if len(reference.applied) > 1:
        assert "MIXED" not in str(reference.states(site))
    st = cli(site, "status")
    assert st.returncode == 10 and "interrupted run" in st.stdout, show(st)
    ver = cli(site, "verify")
    assert ver.returncode != 0, show(ver)
    res = cli(site, "apply")
    assert res.returncode == 0, show(res)
    assert uniform(reference, site, "after apply") == "patched"
    assert cli(site, "verify").returncode == 0
