"""The file transforms of one plan, spread over forked worker processes.

Each file's transform is independent and CPU-bound (libcst parse, edits, codegen), so with
more than one CPU ``apply`` runs them side by side: the files are dealt out by size, the
calling process takes one share and a forked child (with libcst already imported) each other
share, sending its results back through a pipe.  What a child does not deliver (it crashed,
or hit an error other than a :class:`TransformError`) the caller transforms itself, so errors
surface exactly as in a serial run.  Serial where forking is unsafe or pointless: one CPU,
one file, no ``os.fork``, or other threads running.  ``VLLM_COMPAT_JOBS`` caps the processes
(``1``: serial).
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
from collections.abc import Sequence

log = logging.getLogger(__name__)

__all__ = ["jobs", "transform_files"]

Job = tuple[str, bytes, list]  # (file, pristine bytes, patches in catalog order)
Result = tuple[str, object]  # ("ok", bytes) or ("error", (patch id, file, message))


def jobs(n_files: int) -> int:
    """How many processes to use for ``n_files`` transforms."""
    if n_files < 2 or not hasattr(os, "fork") or threading.active_count() > 1:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    cap = os.environ.get("VLLM_COMPAT_JOBS", "")
    if cap.isdigit() and int(cap) > 0:
        cpus = min(cpus, int(cap))
    return max(1, min(cpus, n_files))


def _deal(work: Sequence[Job], k: int) -> list[list[Job]]:
    """``work`` in ``k`` shares of about equal source size (largest first, to the lightest)."""
    shares: list[list[Job]] = [[] for _ in range(k)]
    loads = [0] * k
    for job in sorted(work, key=lambda j: -len(j[1])):
        i = loads.index(min(loads))
        shares[i].append(job)
        loads[i] += len(job[1])
    return shares


def _transform(rel: str, pristine: bytes, patches: list) -> bytes:
    from .transform import transform_file  # noqa: PLC0415 - libcst

    return transform_file(rel, pristine.decode("utf-8"), patches).encode("utf-8")


def _run_share(share: list[Job]) -> dict[str, Result]:
    from .transform import TransformError  # noqa: PLC0415

    out: dict[str, Result] = {}
    for rel, pristine, patches in share:
        try:
            out[rel] = ("ok", _transform(rel, pristine, patches))
        except TransformError as exc:
            out[rel] = ("error", (exc.patch_id, exc.file, exc.message))
        except Exception:  # noqa: BLE001 - left out: the caller redoes it and raises the real error
            pass
    return out


def _fork(share: list[Job]) -> tuple[int, int]:
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its share, then out without running the parent's cleanup
        code = 1
        try:
            os.close(rfd)
            data = pickle.dumps(_run_share(share))
            with os.fdopen(wfd, "wb") as fh:
                fh.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(wfd)
    return pid, rfd


def _collect(pid: int, rfd: int) -> dict[str, Result]:
    try:
        with os.fdopen(rfd, "rb") as fh:
            data = fh.read()
    finally:
        os.waitpid(pid, 0)
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001 - a child that died mid-write: its files are redone
        log.debug("a transform worker returned nothing usable; its files are redone serially")
        return {}


def transform_files(work: Sequence[Job]) -> dict[str, bytes]:
    """``{file: its bytes after its patches}`` for every job, in up to :func:`jobs` processes.

    Raises :class:`~vllm_compat.transform.TransformError` for the first file of ``work`` (in
    order) that fails, as a serial run does."""
    from .transform import TransformError  # noqa: PLC0415 - libcst, imported before any fork

    results: dict[str, Result] = {}
    k = jobs(len(work))
    if k > 1:
        shares = _deal(work, k)
        children = [_fork(share) for share in shares[1:]]
        try:
            results.update(_run_share(shares[0]))
        finally:  # every child is reaped, whatever happened here
            for pid, rfd in children:
                results.update(_collect(pid, rfd))
    out: dict[str, bytes] = {}
    for rel, pristine, patches in work:
        kind, value = results.get(rel, ("redo", None))
        if kind == "ok":
            out[rel] = value  # type: ignore[assignment]
        elif kind == "error":
            raise TransformError(*value)  # type: ignore[misc]
        else:
            out[rel] = _transform(rel, pristine, patches)
    return out
