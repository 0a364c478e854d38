"""How installed versions are matched against a patch's ranges.

Decision (documented in the README): versions are PEP 440 versions parsed with ``packaging``.
The *local* label is ignored (``0.32.0+cpu``, ``0.16.0rc2.dev45+g1234abc.cu129`` is matched as
``0.16.0rc2.dev45``), and pre-releases and dev builds match ranges by plain PEP 440 ordering
(``0.16.0rc2.dev45`` lies after 0.15.x and before 0.16.0), with PEP 440's one exclusion kept:
``<0.16`` does not admit 0.16's own pre-releases.  So a 0.16 nightly gets the patches for
``>=0.11.1`` but neither those for ``>=0.16.0`` nor those for ``<0.16``: for a break that
landed inside that development cycle only a probe of the installed source can tell, which is
what a patch's ``probes`` are for.
"""

from __future__ import annotations

from functools import lru_cache

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["InvalidSpecifier", "InvalidVersion", "matches", "may_overlap", "public"]


@lru_cache(maxsize=None)
def public(version: str) -> Version:
    return Version(Version(version).public)


@lru_cache(maxsize=None)
def _spec(spec: str) -> SpecifierSet:
    return SpecifierSet(spec)


def matches(spec: str, version: str) -> bool:
    return _spec(spec).contains(public(version), prereleases=True)


def may_overlap(a: str, b: str) -> bool:
    """Whether some version satisfies both ranges (checked at every boundary they name)."""
    points: set[Version] = {Version("0"), Version("99999")}
    for s in (*_spec(a), *_spec(b)):
        v = Version(s.version.replace(".*", ""))
        rel = list(v.release) + [0] * 3
        points |= {v, Version(".".join(map(str, rel[:2] + [rel[2] + 1]))), Version(f"{v.base_version}.post1")}
        points.add(Version(".".join(map(str, [rel[0], rel[1] + 1, 0]))))
    return any(matches(a, str(p)) and matches(b, str(p)) for p in points)
