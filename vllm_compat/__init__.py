"""vllm-compat: versioned, verifiable source patches for speculators on current vLLM.

Kept import-free on purpose: ``status`` and ``verify`` must start in a few milliseconds.
"""

__version__ = "0.1.0"
