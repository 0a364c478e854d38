"""The patch catalog: one module per upstream break under ``patches/<target>/``."""
