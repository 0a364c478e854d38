"""Catalog loading: which catalogs are in use (:mod:`.sources`, import-free for the fast path),
the patch declarations (:mod:`.patch`) and advisories (:mod:`.advisory`) their modules register,
loading and validating them together (:mod:`.loader`), and version matching (:mod:`.versions`).

Nothing is imported here: ``verify``'s fast path imports :mod:`.sources` alone.
"""
