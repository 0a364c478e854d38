"""``eagle3 extract --backend vllm-fast``: hidden states at prefill speed, written in the worker.

The slow way (speculators' generator, upstream) returns every captured tensor from the worker
to the driver through ``collective_rpc``.  Here the worker does everything and the driver only
sees small summaries.  By job:

* ``patches/shims/capture.py`` (shared with the patched speculators generator): hooks on the
  decoder layers, the per-step layout of requests, pinned host copies on a side CUDA stream,
  the thread pool that takes finished requests;
* :mod:`.worker`: the worker extension; which requests to capture, validation, the files;
* :mod:`.files`: the atomic sample writers (``raw``: ``os.pwrite`` from the pinned buffers);
* :mod:`.driver`: the ``LLM`` settings, submission in batches, resume, the summary.

``LLM(..., worker_extension_cls=EXTENSION, enable_prefix_caching=False, enforce_eager=True)``
(:func:`make_llm`); :func:`run_fast` registers each batch's samples with the worker, then
``LLM.generate(max_tokens=1)`` runs them.  Layer ids follow the capture convention of
:mod:`eagle3_runner.common.layers`.
"""

from ....common.formats import sample_path
from .driver import extract_fast, make_llm, run_fast, setup_capture
from .files import write_sample_atomic, valid_sample_file
from .worker import EXTENSION, EXTRA_KEY, CaptureWorkerExtension

__all__ = ["EXTENSION", "EXTRA_KEY", "CaptureWorkerExtension", "extract_fast", "make_llm", "run_fast",
           "sample_path", "setup_capture", "valid_sample_file", "write_sample_atomic"]
