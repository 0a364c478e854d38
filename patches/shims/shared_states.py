"""Hidden states from a vLLM worker to the driver through shared memory, without pickling.

Vendored by vllm-compat as ``speculators/_vllm_compat_shared_states.py`` (the
``speculators.states_in_shared_memory`` patch), beside ``_vllm_compat_capture``.  Worker
side: :class:`SharedStatesWriter` is the capture's sink; for each finished request it writes
every layer's ``[T, H]`` states into its own file under ``/dev/shm`` (``os.pwrite`` from the pinned host buffer, in the
capture's threads, while the next steps run) and returns small descriptors, which are all
that travels through ``collective_rpc``.  Driver side: :func:`receive_states` maps each file
(``torch.from_file(shared=True)``: no copy) and unlinks it at once, so each returned tensor
owns its memory, which is freed with the tensor, as with a ``clone()``.

Where ``/dev/shm`` is missing or lacks room for a request (a small container ``--shm-size``),
that request's tensors travel the old way (pickled through ``collective_rpc``): slower, same
result; ``VLLM_COMPAT_STATES_DIR`` names another folder of the same machine (e.g. a local disk:
the files live in its page cache, mapped and unlinked as from ``/dev/shm``).  The worker removes files the driver never mapped (a driver that died) at the next
reset and at shutdown.
"""

from __future__ import annotations

import itertools
import logging
import os
import uuid
from typing import Any

import torch

from speculators._vllm_compat_host_memory import bytes_view, pwrite_all

__all__ = ["SharedStatesWriter", "receive_states"]

logger = logging.getLogger(__name__)

TAG = "vllm-compat-shm"  # first field of a descriptor: (TAG, path, dtype name, shape)
HEADROOM = 256 << 20  # bytes left free in the folder: vLLM's own message queues live there too


class SharedStatesWriter:
    """The capture's sink in the worker: one shared-memory file per (request, layer)."""

    def __init__(self, folder: str | None = None) -> None:
        folder = folder or os.environ.get("VLLM_COMPAT_STATES_DIR") or "/dev/shm"
        self.folder = folder if os.path.isdir(folder) and os.access(folder, os.W_OK) else None
        self.prefix = f"vllm-compat-states-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
        self.counter = itertools.count()
        self.written: list[str] = []
        self.warned = False

    def _room(self, nbytes: int) -> bool:
        if self.folder is None:
            return False
        st = os.statvfs(self.folder)
        return st.f_bavail * st.f_frsize - nbytes > HEADROOM

    def __call__(self, job: Any) -> list[Any]:
        tensors = list(job.host)
        if not self._room(sum(t.numel() * t.element_size() for t in tensors)):
            return self._fallback(tensors, "no room in /dev/shm")
        out: list[Any] = []
        try:
            for t in tensors:
                path = os.path.join(self.folder, f"{self.prefix}{next(self.counter)}")
                self.written.append(path)
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                try:
                    pwrite_all(fd, bytes_view(t))
                finally:
                    os.close(fd)
                out.append((TAG, path, str(t.dtype).removeprefix("torch."), tuple(t.shape)))
        except OSError as exc:  # ENOSPC on a full tmpfs: this request goes the old way
            for d in out:
                _unlink(d[1])
            return self._fallback(tensors, str(exc))
        return out

    def _fallback(self, tensors: list[Any], why: str) -> list[Any]:
        if not self.warned:
            logger.warning("hidden states go through collective_rpc, not shared memory (%s)", why)
            self.warned = True
        return [t.clone() for t in tensors]  # the host buffers are reused once this returns

    def cleanup(self) -> None:
        """Remove what the driver did not take (it unlinks every file it maps)."""
        for path in self.written:
            _unlink(path)
        self.written = []


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _open(item: Any) -> torch.Tensor:
    if not (isinstance(item, tuple) and item and item[0] == TAG):
        return item  # a tensor that travelled through collective_rpc
    _, path, dtype, shape = item
    try:
        numel = 1
        for d in shape:
            numel *= int(d)
        if numel == 0:
            return torch.empty(shape, dtype=getattr(torch, dtype))
        return torch.from_file(path, shared=True, size=numel, dtype=getattr(torch, dtype)).view(shape)
    finally:
        _unlink(path)


def receive_states(reply: Any) -> dict[str, list[torch.Tensor]] | None:
    """The driver's view of ``_get_captured_states``: ``{request id: [tensor per layer id]}``
    with every shared-memory descriptor replaced by its tensor (the file is unlinked)."""
    if isinstance(reply, list):  # a collective_rpc that answered per rank
        reply = next((r for r in reply if r is not None), None)
    if not reply:
        return reply
    try:
        return {rid: [_open(item) for item in items] for rid, items in reply.items()}
    except BaseException:
        for items in reply.values():
            for item in items:
                if isinstance(item, tuple) and item and item[0] == TAG:
                    _unlink(item[1])
        raise
