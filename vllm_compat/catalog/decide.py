"""What applies to an installed site: each patch's decision (applicable, not applicable,
obsolete, and why) and the advisories whose ranges and probes hold."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..target import Dist, Target
from .advisory import CONDITIONS, Advisory
from .patch import Patch, Probe
from .versions import matches

__all__ = ["AdvisoryMatch", "Decision", "advised", "decide", "probe_holds"]


@dataclass(frozen=True)
class Decision:
    """Whether one patch applies to the target, and why (or why not)."""

    patch: Patch
    status: str  # "applicable" | "not-applicable" | "obsolete"
    reason: str


@dataclass(frozen=True)
class AdvisoryMatch:
    """An advisory whose ranges and probes hold for the installed versions."""

    advisory: Advisory
    versions: dict[str, str]  # import package -> the installed version it matched
    allowed: bool = False  # accepted with --allow-advisory

    def to_dict(self) -> dict:
        a = self.advisory
        return {"id": a.id, "title": a.title, "why": a.why, "fix": a.fix, "upstream": a.upstream,
                "condition": CONDITIONS.get(a.condition, ""), "versions": self.versions, "allowed": self.allowed}


def probe_holds(target: Target, probe: Probe, dists: dict[str, Dist | None]) -> bool:
    if dists.get(probe.dist) is None:
        return False
    rel = probe.file
    if not rel or rel.startswith("/") or ".." in rel.split("/"):
        return False  # (the loader's paths never leave the site; a probe only reads)
    try:  # read through symlinks: check --against links a release's sources into its scratch site
        text = (target.site / rel).read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        found = False
    else:
        found = re.search(probe.pattern, text, re.MULTILINE) is not None
    return found == probe.present


def decide(p: Patch, target: Target, dists: dict[str, Dist | None]) -> Decision:
    owner = dists.get(p.target)
    if owner is None:
        return Decision(p, "not-applicable", f"{p.target} is not installed")
    if not matches(p.target_versions, owner.version):
        return Decision(p, "not-applicable", f"{p.target} {owner.version} not in {p.target_versions}")
    for dep, spec in p.requires.items():
        d = dists.get(dep)
        if d is None:
            return Decision(p, "not-applicable", f"{dep} is not installed")
        if not matches(spec, d.version):
            return Decision(p, "not-applicable", f"{dep} {d.version} not in {spec}")
    for probe in p.probes:
        if not probe_holds(target, probe, dists):
            word = "lacks" if probe.present else "has"
            return Decision(p, "not-applicable", f"{probe.file} {word} /{probe.pattern}/")
    if p.obsolete_if and all(probe_holds(target, q, dists) for q in p.obsolete_if):
        return Decision(p, "obsolete", "upstream already has this change")
    return Decision(p, "applicable", "")


def advised(a: Advisory, target: Target, dists: dict[str, Dist | None]) -> AdvisoryMatch | None:
    """``a``'s match when every range of it holds for the installed versions and every probe
    for the installed source; None otherwise."""
    found = {pkg: dists.get(pkg) for pkg in a.when}
    if any(d is None or not matches(a.when[pkg], d.version) for pkg, d in found.items()):
        return None
    if not all(probe_holds(target, q, dists) for q in a.probes):
        return None
    return AdvisoryMatch(a, {pkg: d.version for pkg, d in found.items() if d is not None})
