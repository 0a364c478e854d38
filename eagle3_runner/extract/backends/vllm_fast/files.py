"""The fast path's sample files: atomic writes straight from the pinned host buffers.

The ``raw`` writer lays the file out with ``torch.save`` under ``torch.serialization.skip_data``
(header and pickle only), then ``os.pwrite``s the tensor bytes from the host buffers (no GIL
held, no extra copy); the result is an ordinary ``torch.load``-able dict in speculators'
format.  ``torch`` is plain ``torch.save``.  Both write a temporary sibling and
``os.replace`` it into place (fsync first where asked).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from patches.shims.host_memory import bytes_view, pwrite_all

from ....common.atomic import TMP_MARK
from ....common.formats import existing_sample_ok

WRITE_MODES = ("raw", "torch", "none")  # none: capture, copy and validate only (benchmarks)


def _has_skip_data() -> bool:
    import torch

    return hasattr(torch.serialization, "skip_data") and hasattr(torch._C, "PyTorchFileReader")


def write_sample_atomic(path: str | os.PathLike, sample: dict, mode: str = "raw", fsync: bool = True) -> int:
    """Write ``sample`` to ``path`` atomically (temp + optional fsync + os.replace); return
    the tensor bytes written.  ``raw`` needs tensors that own their whole storage (no views)."""
    import torch

    path = Path(path)
    # Same temporary naming as eagle3_runner.common.atomic, so clean_temporaries() removes leftovers.
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}")
    tensors = [sample["input_ids"], *sample["hidden_states"], sample["loss_mask"]]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    try:
        if mode == "raw" and _has_skip_data():
            for t in tensors:
                if t.untyped_storage().nbytes() != t.numel() * t.element_size() or not t.is_contiguous():
                    raise ValueError("raw writer needs tensors that own their whole storage")
            with torch.serialization.skip_data():
                torch.save(sample, str(tmp))
            reader = torch._C.PyTorchFileReader(str(tmp))
            # Storage keys follow pickling order: input_ids, hidden_states..., loss_mask.
            offsets = [reader.get_record_offset(f"data/{k}") for k in range(len(tensors))]
            del reader
            fd = os.open(tmp, os.O_WRONLY)
            try:
                for t, off in zip(tensors, offsets):
                    pwrite_all(fd, bytes_view(t), off)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with open(tmp, "wb") as f:
                torch.save(sample, f)
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return nbytes


def valid_sample_file(path: str | os.PathLike, input_ids: Sequence[int], num_layers: int, hidden_size: int) -> bool:
    """True if ``path`` holds a loadable sample of this shape for ``input_ids`` (resume check)."""
    return existing_sample_ok(Path(path), num_layers=num_layers, hidden_size=hidden_size, input_ids=list(input_ids))
