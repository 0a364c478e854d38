"""Patches of the ``speculators`` distribution."""
