"""Step 3: the blank lines and comments that came with removed statements."""

from __future__ import annotations

from collections import Counter

from .diff import _matcher


class _TriviaCleanup:
    """Step 3 of :class:`._Stripper`."""

    # -- step 3: blank lines and comments that came with removed statements ---------------------
    def _live(self) -> list[int]:
        return [i for i in range(len(self.cur.units)) if self.texts.get(i, None) != ""]

    def _text(self, u: int) -> str:
        return self.texts.get(u, self.cur.units[u].text)

    def trivia(self) -> None:
        """Drop the blank/comment lines that came with removed statements.

        Code lines that match ``expected`` (or are 1:1 edits of it) anchor the alignment;
        between two anchors where something was removed, the blank/comment lines are made
        those of ``expected`` when that is possible by dropping lines (dropped comments must
        touch a removed statement); otherwise only runs of added ones touching a removed
        statement go.
        """
        if self.exp is None:
            return
        deleted = {u for u, t in self.texts.items() if t == ""}
        if not deleted:
            return
        cur, exp = self.cur, self.exp
        live = self._live()
        live_code = [u for u in live if not cur.units[u].trivia]
        exp_code = [i for i, u in enumerate(exp.units) if not u.trivia]
        sm = _matcher([exp.units[i].text for i in exp_code], [self._text(u) for u in live_code])
        anchors = [(-1, -1)]
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                anchors.extend((exp_code[i1 + k], live_code[j1 + k]) for k in range(i2 - i1))
        anchors.append((len(exp.units), len(cur.units)))
        live_set = set(live)
        for (ea, ca), (eb, cb) in zip(anchors, anchors[1:]):
            if not any(u in deleted for u in range(ca + 1, cb)):
                continue
            gap_exp = list(range(ea + 1, eb))
            gap_cur = [u for u in range(ca + 1, cb) if u in live_set]
            if all(exp.units[i].trivia for i in gap_exp) and all(
                    cur.units[u].trivia for u in gap_cur) and self._gap_exact(gap_exp, gap_cur,
                                                                              deleted):
                continue
            self._gap_runs(gap_exp, gap_cur, ca, cb, deleted)

    def _gap_exact(self, gap_exp: list[int], gap_cur: list[int], deleted: set[int]) -> bool:
        """Make a blank/comment-only gap read as in ``expected`` by dropping lines."""
        want = [self.exp.units[i].text for i in gap_exp]
        drop = []
        k = 0
        for u in gap_cur:
            if k < len(want) and self._text(u) == want[k]:
                k += 1
            else:
                drop.append(u)
        if k < len(want):
            return False  # the upstream blank/comment lines were edited: not ours to decide
        # A dropped comment must touch a removed statement (directly or through other
        # dropped comments); a blank line may go anywhere in the gap.
        comments = {u for u in drop if self.cur.units[u].text.strip()}
        attached = set(deleted)
        grew = True
        while grew:
            grew = False
            for u in comments - attached:
                if u - 1 in attached or u + 1 in attached:
                    attached.add(u)
                    grew = True
        for u in drop:
            if u not in comments or u in attached:
                self.texts[u] = ""
        return True

    def _gap_runs(self, gap_exp: list[int], gap_cur: list[int], left: int, right: int,
                  deleted: set[int]) -> None:
        """Drop runs of added blank/comment lines that touch a removed statement."""
        cur, exp = self.cur, self.exp
        a = [exp.units[i].text for i in gap_exp]
        b = [self._text(u) for u in gap_cur]
        # Never drop more copies of a blank/comment line than this gap has beyond upstream's
        # (an upstream line deleted by hand shifts the alignment of the blank lines around it).
        excess = Counter(t for u, t in zip(gap_cur, b) if cur.units[u].trivia)
        excess.subtract(exp.units[i].text for i in gap_exp if exp.units[i].trivia)
        for tag, i1, i2, j1, j2 in _matcher(a, b).get_opcodes():
            # In a changed hunk, blank/comment lines may be edits of upstream ones: only when
            # the upstream side has none are they taken for additions.
            if tag == "equal" or (tag == "replace" and any(exp.units[i].trivia
                                                           for i in gap_exp[i1:i2])):
                continue
            j = j1
            while j < j2:  # maximal runs of blank/comment lines
                if not cur.units[gap_cur[j]].trivia:
                    j += 1
                    continue
                k = j
                while k < j2 and cur.units[gap_cur[k]].trivia:
                    k += 1
                self._drop_run(gap_cur, b, j, k, left, right, deleted, excess)
                j = k

    def _drop_run(self, units: list[int], b: list[str], j: int, k: int, left: int, right: int,
                  deleted: set[int], excess: Counter) -> None:
        n = len(units)
        length = k - j

        def touches(p: int) -> bool:
            lo = units[p - 1] + 1 if p > 0 else left + 1
            hi = units[p + length] - 1 if p + length < n else right - 1
            return any(u in deleted for u in range(lo, hi + 1))

        # The run may slide over identical lines; any position gives the same text.
        positions = [j]
        p = j
        while p > 0 and b[p - 1] == b[p - 1 + length]:
            p -= 1
            positions.append(p)
        p = j
        while p + length < n and b[p] == b[p + length]:
            p += 1
            positions.append(p)
        for p in positions:
            if touches(p):
                for u, text in zip(units[p:p + length], b[p:p + length]):
                    if excess[text] > 0:
                        excess[text] -= 1
                        self.texts[u] = ""
                return
