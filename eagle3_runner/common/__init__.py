"""Helpers every stage shares (errors, atomic files, sample formats, layer ids, progress, the
machine, the verifier's head, the draft model); they import no stage."""
