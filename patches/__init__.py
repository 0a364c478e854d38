"""The patch catalog: one module per upstream break under ``patches/<target>/``."""

# The ranges this catalog is proven on (static matrix and runtime proofs, see the README).
# An installed version outside them is "unsupported" (exit 13) unless --allow-unsupported.
SUPPORTED = {
    "speculators": ">=0.3.0,<0.5",
    "vllm": ">=0.11.0,<0.35",
}
