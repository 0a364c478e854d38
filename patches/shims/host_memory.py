"""Host memory for captured states: pinned buffers, and writing their bytes to files.

Vendored as ``speculators/_vllm_compat_host_memory.py`` beside ``_vllm_compat_capture`` (the
``speculators.capture_hooks`` patch); the capture carves per-request buffers out of
:class:`PinnedPool`, and its sinks (``_vllm_compat_shared_states``, ``eagle3_runner``'s fast
path) write them with :func:`pwrite_all` over :func:`bytes_view`, which release the GIL.
"""

from __future__ import annotations

import os
import threading

import torch

__all__ = ["PinnedPool", "bytes_view", "pwrite_all"]


def pwrite_all(fd: int, data: memoryview, offset: int = 0) -> None:
    done = 0
    while done < len(data):
        n = os.pwrite(fd, data[done:], offset + done)
        if n <= 0:
            raise OSError(f"pwrite wrote {n} bytes")
        done += n


def bytes_view(t: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, without a copy (os.pwrite releases the GIL)."""
    return memoryview(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy()).cast("B")


class PinnedPool:
    """Per-request host buffers carved (first fit) out of one pinned allocation made at setup,
    so the steps never wait for ``cudaHostAlloc``; when it is full, torch's caching pinned
    allocator serves the rest.  Each tensor owns a storage of exactly its own bytes."""

    def __init__(self, nbytes: int, align: int = 4096) -> None:
        self.align = align
        self.array = torch.empty(max(int(nbytes), align), dtype=torch.uint8, pin_memory=True).numpy()
        self.free = [(0, len(self.array))]  # sorted, coalesced (offset, size)
        self.owner: dict[int, tuple[int, int]] = {}  # data_ptr -> (offset, size)
        self.lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        numel = 1
        for d in shape:
            numel *= d
        size = -(-numel * dtype.itemsize // self.align) * self.align
        with self.lock:
            k = next((k for k, (_, n) in enumerate(self.free) if n >= size), None)
            if k is None:
                return torch.empty(shape, dtype=dtype, pin_memory=True)
            off, n = self.free[k]
            self.free[k:k + 1] = [(off + size, n - size)] if n > size else []
            t = torch.frombuffer(self.array, dtype=dtype, count=numel, offset=off).view(shape)
            self.owner[t.data_ptr()] = (off, size)
        return t

    def give(self, tensors: list[torch.Tensor]) -> None:
        with self.lock:
            for t in tensors:
                span = self.owner.pop(t.data_ptr(), None)
                if span is not None:
                    self.free.append(span)
            self.free.sort()
            merged: list[tuple[int, int]] = []
            for off, n in self.free:
                if merged and merged[-1][0] + merged[-1][1] == off:
                    merged[-1] = (merged[-1][0], merged[-1][1] + n)
                else:
                    merged.append((off, n))
            self.free = merged
