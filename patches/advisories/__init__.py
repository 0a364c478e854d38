"""Advisories: known-bad combinations of installed distributions that no patch fixes (an
upgrade does).  One module per combination, each ``register(Advisory(...), __name__)``."""
