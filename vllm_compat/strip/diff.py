"""``current`` against ``expected``: which code units were added (step 1: only those may lose
statements) and every other difference, reported as a leftover (step 4)."""

from __future__ import annotations

import ast
import difflib

from .debug import (_bodies, _clause_header, _debug_only_kind, _is_compound, _is_debug,
                    _unit_debug_kind)
from .results import Leftover
from .source import _Source

# A changed debug line whose text is at least this similar to an upstream debug line in the
# same changed hunk is taken for an edit of that line (kept), not for an addition.
_EDIT_SIMILARITY = 0.6


def _items(src: _Source, logging: bool) -> list[tuple[str, list[int]]]:
    """The code of ``src`` as diff items: one per code unit, except that a compound statement
    holding only debug output is one item, and so is an ``else:``/``finally:`` clause holding
    only debug output (so an added ``try:``/``else:`` line is never matched with an upstream
    one)."""
    groups: dict[int, int] = {}

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if not _is_compound(stmt):
                continue
            if _debug_only_kind(stmt, logging) is not None:
                groups[src.unit_of_line[stmt.lineno]] = src.unit_of_line[stmt.end_lineno]
                continue
            for inner in _bodies(stmt):
                header = _clause_header(src, stmt, inner)
                if header is not None and all(_is_debug(s, logging) for s in inner):
                    groups[header] = src.unit_of_line[inner[-1].end_lineno]
                else:
                    visit(inner)

    visit(src.tree.body)
    items = []
    u = 0
    while u < len(src.units):
        last = groups.get(u, u)
        units = [v for v in range(u, last + 1) if not src.units[v].trivia]
        if units:
            items.append(("".join(src.units[v].text for v in units), units))
        u = last + 1
    return items


def _summary(text: str, limit: int = 100) -> str:
    parts = [line.strip() for line in text.splitlines() if line.strip()]
    out = " ".join(parts) if parts else "<blank line>"
    return out if len(out) <= limit else out[: limit - 3] + "..."


def _pair(olds: list[str], news: list[str]) -> list[tuple[int, int]]:
    """Order-preserving pairs (old index, new index) of a changed hunk: all of them when the
    counts agree, else greedily the lines that are similar enough to be edits of each other."""
    if len(olds) == len(news):
        return [(i, i) for i in range(len(olds))]
    pairs: list[tuple[int, int]] = []
    start = 0
    for i, old in enumerate(olds):
        for j in range(start, len(news)):
            if difflib.SequenceMatcher(None, old.strip(), news[j].strip()).ratio() >= 0.5:
                pairs.append((i, j))
                start = j + 1
                break
    return pairs


def _matcher(a: list[str], b: list[str]) -> difflib.SequenceMatcher:
    return difflib.SequenceMatcher(None, a, b, autojunk=False)


class _Diff:
    """Steps 1 and 4 of :class:`._Stripper`."""

    # -- step 1: which units may lose statements ------------------------------------------
    def _eligible_units(self) -> set[int]:
        cur = self.cur
        if self.exp is None:
            return set(range(len(cur.units)))
        exp = self.exp
        exp_items = _items(exp, self.logging)
        cur_items = _items(cur, self.logging)
        sm = _matcher([t for t, _ in exp_items], [t for t, _ in cur_items])
        eligible: set[int] = set()
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal":
                continue
            changed = [u for _, us in cur_items[j1:j2] for u in us]
            if tag == "insert":
                eligible.update(changed)
                continue
            # A changed hunk: what still matches unit by unit (the header of a block whose
            # body changed) is not new.
            olds = [u for _, us in exp_items[i1:i2] for u in us]
            inner = _matcher([exp.units[u].text for u in olds], [cur.units[u].text for u in changed])
            matched = {changed[j] for block in inner.get_matching_blocks()
                       for j in range(block.b, block.b + block.size)}
            olds = [u for k, u in enumerate(olds) if not any(
                block.a <= k < block.a + block.size for block in inner.get_matching_blocks())]
            changed = [u for u in changed if u not in matched]
            eligible.update(changed)
            # An edited upstream debug line is an edit, not an addition: keep it.
            upstream = [(u, _unit_debug_kind(exp, u, True)) for u in olds]
            upstream = [(u, k) for u, k in upstream if k is not None]
            for u in changed:
                kind = _unit_debug_kind(cur, u, True)
                if kind is None:
                    continue
                text = cur.units[u].text.strip()
                for pos, (i, k) in enumerate(upstream):
                    ratio = difflib.SequenceMatcher(None, exp.units[i].text.strip(), text).ratio()
                    if k == kind and ratio >= _EDIT_SIMILARITY:
                        eligible.discard(u)
                        del upstream[pos]
                        break
        return eligible

    def _all_eligible(self, stmt: ast.stmt) -> bool:
        return all(u in self.eligible for u in self.cur.code_units(stmt)
                   if not self.cur.units[u].trivia)

    # -- step 4: report ---------------------------------------------------------------------
    def leftovers(self) -> tuple[Leftover, ...]:
        if self.exp is None:
            return ()
        live = self._live()
        b = [self._text(u) for u in live]
        a = [u.text for u in self.exp.units]
        out: list[Leftover] = []
        for tag, i1, i2, j1, j2 in _matcher(a, b).get_opcodes():
            if tag == "equal":
                continue
            olds = a[i1:i2]
            news = [(self.cur.units[live[j]].first, b[j]) for j in range(j1, j2)]
            pairs = _pair(olds, [t for _, t in news])
            oi = ni = 0
            for po, pn in pairs + [(len(olds), len(news))]:
                out.extend(Leftover(0, f"removed: {_summary(o)}") for o in olds[oi:po])
                out.extend(Leftover(line, f"added: {_summary(t)}") for line, t in news[ni:pn])
                if po < len(olds):
                    line, t = news[pn]
                    out.append(Leftover(line, f"changed: {_summary(olds[po])} -> {_summary(t)}"))
                oi, ni = po + 1, pn + 1
        return tuple(out)
