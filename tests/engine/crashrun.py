"""Test-only wrapper: runs ``vllm_compat`` with its write operations instrumented.

Usage: ``python crashrun.py <vllm_compat args...>`` with, in the environment:

* ``VLLM_COMPAT_CRASH_AT=N`` and ``VLLM_COMPAT_CRASH_WHEN=before|after``: SIGKILL the process
  right before / right after the N-th write operation (1-based).
* ``VLLM_COMPAT_TRACE=FILE``: append one line per write operation (``pid op path t``).
* ``VLLM_COMPAT_SLOW=SECONDS``: sleep after every write operation (widens race windows).

A write operation is a call of ``vllm_compat.store.atomic_write``, ``os.replace``,
``os.unlink``, ``os.rmdir``, ``os.mkdir`` or ``shutil.rmtree`` (``Path.unlink``/``mkdir`` go
through ``os``; ``shutil.rmtree`` deletes through ``os.unlink``/``os.rmdir``, so a crash can
land in the middle of it).  Nothing here is part of the library: the hooks are installed by
monkeypatching before the CLI runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

CRASH_AT = int(os.environ.get("VLLM_COMPAT_CRASH_AT", "0"))
WHEN = os.environ.get("VLLM_COMPAT_CRASH_WHEN", "before")
TRACE = os.environ.get("VLLM_COMPAT_TRACE")
SLOW = float(os.environ.get("VLLM_COMPAT_SLOW", "0"))
_count = 0  # nested operations (os.replace inside atomic_write) are counted too


def _crash() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _wrap(op: str, fn):
    def hooked(path, *args, **kwargs):
        global _count
        if op == "mkdir" and os.path.isdir(path) and "dir_fd" not in kwargs:
            return fn(path, *args, **kwargs)  # raises FileExistsError: writes nothing
        _count += 1
        index = _count
        if TRACE:
            fd = os.open(TRACE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, f"{os.getpid()} {op} {os.fspath(path)} {time.time():.6f}\n".encode())
            finally:
                os.close(fd)
        if index == CRASH_AT and WHEN == "before":
            _crash()
        out = fn(path, *args, **kwargs)
        if index == CRASH_AT and WHEN == "after":
            _crash()
        if SLOW:
            time.sleep(SLOW)
        return out

    hooked.__wrapped__ = fn
    return hooked


def install() -> None:
    import vllm_compat.store as store

    store.atomic_write = _wrap("atomic_write", store.atomic_write)
    os.replace = _wrap("replace", os.replace)
    os.unlink = _wrap("unlink", os.unlink)
    os.remove = os.unlink
    os.rmdir = _wrap("rmdir", os.rmdir)
    os.mkdir = _wrap("mkdir", os.mkdir)
    shutil.rmtree = _wrap("rmtree", shutil.rmtree)
    # shutil.rmtree has a .avoids_symlink_attacks attribute some callers check
    shutil.rmtree.avoids_symlink_attacks = getattr(shutil.rmtree.__wrapped__, "avoids_symlink_attacks", False)


def fresh_catalog() -> None:
    """Forget the imported catalog so the next ``catalog.load()`` reads ``patches/`` afresh, as a
    new process would (the catalog is edited while tests run; ``load()`` in a process that
    loaded an older catalog only returns the patches registered since)."""
    from vllm_compat.catalog import advisory, patch

    for name in [m for m in sys.modules if m == "patches" or m.startswith("patches.")]:
        del sys.modules[name]
    patch._REGISTRY.clear()
    advisory._REGISTRY.clear()


def run_forked(argv: list[str], crash_at: int, when: str) -> tuple[bool, int, int]:
    """Run the CLI with ``argv`` in a forked child (the test process has libcst imported
    already, so a crash point costs milliseconds instead of a Python start-up), SIGKILLed at
    write operation ``crash_at``.  Returns (killed, exit code, write operations performed)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 70
        try:
            os.close(rfd)
            global CRASH_AT, WHEN, TRACE, SLOW
            CRASH_AT, WHEN, TRACE, SLOW = crash_at, when, None, 0.0
            install()
            from vllm_compat.entry import main

            with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()) as err:
                code = main(argv)
            os.write(wfd, f"{_count} {code}\n{err.getvalue()}".encode())
        except BaseException as exc:  # noqa: BLE001 - report anything to the parent
            os.write(wfd, f"{_count} 71\n{type(exc).__name__}: {exc}".encode())
        finally:
            os._exit(0)
    os.close(wfd)
    chunks = []
    while True:
        b = os.read(rfd, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(rfd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL, status
        return True, -9, crash_at
    head, _, err = b"".join(chunks).decode().partition("\n")
    count, code = map(int, head.split())
    if code != 0:
        raise AssertionError(f"{argv} exited {code}: {err}")
    return False, code, count


if __name__ == "__main__":
    install()
    from vllm_compat.entry import main

    code = main(sys.argv[1:])
    sys.stdout.flush()
    print(f"write-ops: {_count}", file=sys.stderr)
    sys.exit(code)
