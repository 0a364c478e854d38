"""apply's transforms in forked workers (vllm_compat/parallel.py) on the real speculators 0.3.0
files: the same bytes as one process, the same first error, and a worker that dies is redone."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from vllm_compat import parallel
from vllm_compat.patch import ReplaceStmt
from vllm_compat.plan import make_plan
from vllm_compat.target import Target
from vllm_compat.transform import TransformError


@pytest.fixture
def work(site):
    plan = make_plan(Target.resolve(str(site)))
    todo = [fs for fs in plan.report.files if fs.patches and not plan.is_shim(fs.path)]
    assert len(todo) >= 4
    return [(fs.path, plan.pristine(fs.path, fs), plan.applicable(fs.patches)) for fs in todo]


@pytest.fixture
def two_workers(monkeypatch):
    # pytest's process may hold idle threads of earlier tests (torch, vLLM), which make jobs()
    # choose serial; the children here only run libcst, so forking is safe for these tests.
    monkeypatch.setattr(parallel.threading, "active_count", lambda: 1)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.setenv("VLLM_COMPAT_JOBS", "2")
    assert parallel.jobs(5) == 2


def _serial(work, monkeypatch):
    monkeypatch.setenv("VLLM_COMPAT_JOBS", "1")
    assert parallel.jobs(len(work)) == 1
    out = parallel.transform_files(work)
    monkeypatch.setenv("VLLM_COMPAT_JOBS", "2")
    return out


def test_workers_give_the_bytes_of_one_process(work, two_workers, monkeypatch):
    forked = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forked.append(1) or real_fork())
    got = parallel.transform_files(work)
    assert forked == [1]
    want = _serial(work, monkeypatch)
    assert list(got) == [rel for rel, _, _ in work]
    assert got == want
    assert all(got[rel] != pristine for rel, pristine, _ in work)  # every file was edited


def _broken(job):
    rel, pristine, patches = job
    p = patches[0]
    bad = ReplaceStmt(rel, "", "this_statement_is_nowhere = 1", "x = 2")
    return rel, pristine, [replace(p, edits=(*p.edits, bad)), *patches[1:]]


@pytest.mark.parametrize("which", [0, -1])
def test_the_first_failing_file_in_order_raises_as_in_one_process(work, two_workers, monkeypatch, which):
    work = list(work)
    work[which] = _broken(work[which])
    work[2] = _broken(work[2])
    with pytest.raises(TransformError) as serial:
        _serial(work, monkeypatch)
    with pytest.raises(TransformError) as forked:
        parallel.transform_files(work)
    assert str(forked.value) == str(serial.value)
    assert forked.value.file == work[min(which % len(work), 2)][0]


def test_a_worker_that_dies_has_its_files_redone(work, two_workers, monkeypatch):
    parent = os.getpid()
    real = parallel._run_share

    def dies_in_the_child(share):
        if os.getpid() != parent:
            os._exit(3)
        return real(share)

    monkeypatch.setattr(parallel, "_run_share", dies_in_the_child)
    got = parallel.transform_files(work)
    monkeypatch.setattr(parallel, "_run_share", real)
    assert got == _serial(work, monkeypatch)


def test_serial_with_other_threads_running(monkeypatch):
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
        monkeypatch.setenv("VLLM_COMPAT_JOBS", "2")
        assert threading.active_count() > 1 and parallel.jobs(5) == 1
    finally:
        stop.set()
        t.join()
