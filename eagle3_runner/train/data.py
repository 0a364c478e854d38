"""The fast training path's data loader: speculators' packed batches, built in worker processes.

The batches are the ones speculators' ``Eagle3SampleFileDataset`` + ``create_collate_fn`` build
for the same batch sampler (same keys, values, order, padding and ``lengths`` truncation; a test
compares them), with three differences in *how*:

* the hidden states keep the files' dtype (bf16 from a GPU extraction) until they are on the
  device, where :class:`DevicePrefetcher` casts them to float32 (what speculators' dataset
  does on the CPU): half the bytes through the host, the same values;
* each batch is packed straight into one ``[1, max_len, ...]`` tensor per key (no per-sample
  ``cat`` + ``to(float)`` + batch ``cat`` + pad), in ``DataLoader`` worker processes, pinned
  by the loader's pin thread, and copied to the device one batch ahead on a side stream;
* a malformed sample file stops training with :class:`~eagle3_runner.common.errors.BadInput` naming the
  file and what is wrong (speculators raises whatever indexing or ``torch.cat`` fails with).

Noise (``--noise-std``, speculators' ``AddUniformNoise`` on the auxiliary states) is applied by
the prefetcher on the device, to the real (unpadded) rows.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..common.errors import BadInput
from ..common.formats import load_sample, sample_problems

logger = logging.getLogger(__name__)

ERROR = "_error"  # a batch carrying this key stands for a bad sample file


class SampleFiles:
    """``dataset[i]`` is sample file ``i``, loaded memory-mapped and checked (or an error dict)."""

    def __init__(self, files: Sequence[str], num_layers: int, hidden_size: int) -> None:
        self.files, self.num_layers, self.hidden_size = list(files), num_layers, hidden_size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict[str, Any]:
        path = self.files[index]
        try:
            data = load_sample(path)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is reported by name
            return {ERROR: f"{path}: cannot be loaded as a sample ({type(exc).__name__}: {exc})"}
        # structure and shapes only: extract checked finiteness before writing the file
        why = sample_problems(data, num_layers=self.num_layers, hidden_size=self.hidden_size, check_finite=False)
        return {ERROR: f"{path}: {'; '.join(why)}"} if why else data


class PackCollate:
    """A list of samples -> one packed batch in speculators' layout (see ``shift_batch`` and
    ``create_collate_fn`` in ``speculators/train/data.py``): every sample drops its first token
    (ids, mask, positions) and its last state row (hidden states are one position behind the
    ids they predict from); samples are laid end to end, cut at ``max_len`` and zero-padded;
    ``lengths`` lists the per-sample lengths that fit, the last one cut."""

    def __init__(self, max_len: int) -> None:
        self.max_len = max_len

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        for s in samples:
            if ERROR in s:
                return {ERROR: s[ERROR]}
        n, first = self.max_len, samples[0]["hidden_states"]
        h, aux = first[0].shape[1], len(first) - 1
        dtype = first[0].dtype
        out = {
            "input_ids": torch.zeros(1, n, dtype=torch.long),
            "hidden_states": torch.zeros(1, n, aux * h, dtype=dtype),
            "verifier_last_hidden_states": torch.zeros(1, n, h, dtype=dtype),
            "loss_mask": torch.zeros(1, n, dtype=samples[0]["loss_mask"].dtype),
            "position_ids": torch.zeros(1, n, dtype=torch.long),
        }
        lengths: list[int] = []
        pos = 0
        for s in samples:
            if pos >= n:
                break
            t = s["input_ids"].shape[0] - 1  # after the shift
            take = min(t, n - pos)
            rows = slice(pos, pos + take)
            out["input_ids"][0, rows] = s["input_ids"][1 : 1 + take]
            out["loss_mask"][0, rows] = s["loss_mask"][1 : 1 + take]
            out["position_ids"][0, rows] = torch.arange(1, 1 + take)
            states = s["hidden_states"]
            for k in range(aux):
                out["hidden_states"][0, rows, k * h : (k + 1) * h] = states[k][:take]
            out["verifier_last_hidden_states"][0, rows] = states[-1][1 : 1 + take]
            # speculators keeps lengths while length + cum < max_len; the one reaching it is cut
            lengths.append(take if pos + t < n else n - pos)
            pos += take
        out["lengths"] = torch.tensor(lengths, dtype=torch.long)
        return out


def fast_loader(files: Sequence[str], batch_sampler: Iterable[list[int]], *, max_len: int, num_layers: int,
                hidden_size: int, workers: int, pin_memory: bool, prefetch: int = 4) -> Any:
    """A ``DataLoader`` yielding packed CPU batches (pinned when ``pin_memory``)."""
    from torch.utils.data import DataLoader

    kwargs: dict[str, Any] = {"prefetch_factor": prefetch} if workers > 0 else {}
    return DataLoader(SampleFiles(files, num_layers, hidden_size), batch_sampler=batch_sampler,
                      collate_fn=PackCollate(max_len), num_workers=workers, pin_memory=pin_memory, **kwargs)


class DevicePrefetcher:
    """Batches on ``device``, the next one copied while the current one trains (CUDA: on a
    side stream, ``non_blocking`` from pinned memory); hidden states cast to ``hidden_dtype``;
    ``transform`` (speculators' noise transform) applied to the real rows."""

    def __init__(self, loader: Iterable[dict[str, Any]], device: Any, hidden_dtype: Any,
                 transform: Any = None) -> None:
        import torch

        self.loader, self.device, self.hidden_dtype, self.transform = loader, torch.device(device), hidden_dtype, transform
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        if ERROR in batch:
            raise BadInput(f"bad sample file: {batch[ERROR]}")
        out = {}
        for k, v in batch.items():
            v = v.to(self.device, non_blocking=True)
            out[k] = v.to(self.hidden_dtype) if "hidden_states" in k else v
        if self.transform is not None:
            n = int(batch["lengths"].sum())  # CPU tensor: no device sync
            real = {"hidden_states": out["hidden_states"][:, :n]}
            out["hidden_states"] = out["hidden_states"].clone()
            out["hidden_states"][:, :n] = self.transform(real)["hidden_states"]
        return out

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import torch

        it = iter(self.loader)
        if self.stream is None:
            for batch in it:
                yield self._to_device(batch)
            return

        def stage() -> dict[str, Any] | None:
            batch = next(it, None)
            if batch is None:
                return None
            with torch.cuda.stream(self.stream):
                return self._to_device(batch)

        nxt = stage()
        while nxt is not None:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            current = nxt
            for v in current.values():
                v.record_stream(torch.cuda.current_stream(self.device))
            nxt = stage()
            yield current

