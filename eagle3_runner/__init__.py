"""eagle3: from chat data to a trained EAGLE-3 draft on the patched speculators stack."""

__version__ = "0.1.0"
