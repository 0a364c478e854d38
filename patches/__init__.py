"""The patch catalog: one module per upstream break under ``patches/<target>/``, and the
advisories (known-bad combinations an upgrade fixes) under ``patches/advisories/``."""

# The ranges this catalog is proven on (static matrix and runtime proofs, see the README); a
# tuple: any of its ranges admits.  speculators 0.3/0.4 are patched; 0.5-0.9 import no vLLM (the
# server path: `vllm serve` with vLLM's hidden-states connector), nothing is patched there and
# `check` reads the distributions below instead.  An installed version outside them is
# "unsupported" (exit 13) unless --allow-unsupported.
SUPPORTED = {
    "speculators": (">=0.3.0,<0.5", ">=0.5.0,<0.10"),
    "vllm": ">=0.11.0,<0.35",
}

# Distributions that bind to vLLM's internals without being patched: `vllm-compat check` reads
# every Python file of theirs (imports, calls, attributes, the signatures of the vLLM methods
# they override) against the installed vLLM.
CHECKED = {
    "hs_connectors": "speculators 0.5-0.9's hidden-states connectors: subclasses of vLLM's KVConnectorBase_V1 "
                     "and ExampleHiddenStatesConnector, loaded by vllm serve (kv_connector_module_path)",
}
