"""Step 2: choosing the debug statements (and the imports only they used) to remove, and
removing them unit by unit, inside a logical line where it holds other statements too."""

from __future__ import annotations

import ast

from .debug import (_bodies, _bound_names, _clause_header, _debug_only_kind, _is_compound,
                    _is_elif, _kind)


class _StatementRemoval:
    """Step 2 of :class:`._Stripper`."""

    # -- step 2: choose statements ------------------------------------------------------------
    def choose(self) -> None:
        imports: list[ast.Import | ast.ImportFrom] = []
        self._walk(self.cur.tree.body, imports)
        self._imports(imports)
        if self.exp is not None:
            self._clauses(self.cur.tree.body)

    def _clauses(self, body: list[ast.stmt]) -> None:
        """Mark added else/finally/elif clauses left with nothing to be dropped whole."""
        for stmt in body:
            if not _is_compound(stmt) or id(stmt) in self.removed:
                continue
            for inner in _bodies(stmt):
                self._clauses(inner)
                if not all(id(s) in self.removed for s in inner):
                    continue
                if _is_elif(self.cur, stmt, inner):
                    self.dropped[id(inner)] = None
                    continue
                header = _clause_header(self.cur, stmt, inner)
                if header is not None and header in self.eligible:
                    self.dropped[id(inner)] = header

    def _walk(self, body: list[ast.stmt], imports: list) -> None:
        for stmt in body:
            if _is_compound(stmt):
                if self.exp is not None and self._all_eligible(stmt):
                    kind = _debug_only_kind(stmt, self.logging)
                    if kind is not None:
                        self.removed[id(stmt)] = (stmt, kind)
                        continue
                for inner in _bodies(stmt):
                    self._walk(inner, imports)
                continue
            if self.cur.unit_of_line[stmt.lineno] not in self.eligible:
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                if self.exp is not None or _kind(stmt, False) == "pdb":
                    imports.append(stmt)
                continue
            kind = _kind(stmt, self.logging)
            if kind is not None:
                self.removed[id(stmt)] = (stmt, kind)

    def _imports(self, imports: list) -> None:
        """Remove candidate imports whose names are used only by removed statements
        (pdb imports: by nothing that stays)."""
        if not imports:
            return
        in_removed: set[int] = set()
        for stmt, _ in self.removed.values():
            in_removed.update(id(n) for n in ast.walk(stmt) if isinstance(n, ast.Name))
        uses: dict[str, list[ast.Name]] = {}
        for node in ast.walk(self.cur.tree):
            if isinstance(node, ast.Name):
                uses.setdefault(node.id, []).append(node)
        for stmt in imports:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                continue
            names = _bound_names(stmt)
            if not names:
                continue
            kept = any(id(n) not in in_removed for name in names for n in uses.get(name, ()))
            dropped = any(id(n) in in_removed for name in names for n in uses.get(name, ()))
            kind = _kind(stmt, False)
            if not kept and (dropped or kind == "pdb"):
                self.removed[id(stmt)] = (stmt, kind or "import")

    # -- applying: edits per unit ---------------------------------------------------------------
    def apply(self) -> None:
        self._apply_body(self.cur.tree.body, module=True)

    def _is_removed(self, stmt: ast.stmt) -> bool:
        return id(stmt) in self.removed

    def _apply_body(self, body: list[ast.stmt], module: bool = False) -> None:
        cur = self.cur
        chains: list[list[ast.stmt]] = []
        for stmt in body:
            if chains and cur.unit_of_line[stmt.lineno] == cur.unit_of_line[chains[-1][-1].end_lineno]:
                chains[-1].append(stmt)
            else:
                chains.append([stmt])
        empty = not module and all(self._is_removed(s) for s in body)
        if id(body) in self.dropped:
            empty = False
            header = self.dropped[id(body)]
            if header is not None:
                for u in range(header, cur.unit_of_line[body[0].lineno]):
                    self.texts[u] = ""
        for n, chain in enumerate(chains):
            for stmt in chain:
                if _is_compound(stmt) and not self._is_removed(stmt):
                    for inner in _bodies(stmt):
                        self._apply_body(inner)
            if not any(self._is_removed(s) for s in chain):
                continue
            self._apply_chain(chain, need_pass=empty and n == 0)

    def _apply_chain(self, chain: list[ast.stmt], need_pass: bool) -> None:
        cur = self.cur
        first_u = cur.unit_of_line[chain[0].lineno]
        last_u = cur.unit_of_line[chain[-1].end_lineno]
        unit = cur.units[first_u]
        start, _ = cur.span(chain[0])
        _, end = cur.span(chain[-1])
        line_start = cur.starts[chain[0].lineno - 1]
        prefix = cur.text[line_start:start]
        own_line = not prefix.strip() and chain[0].lineno == unit.first
        kept = [i for i, s in enumerate(chain) if not self._is_removed(s)]
        if own_line and not kept:
            last_line = cur.lines[cur.units[last_u].last - 1]
            eol = last_line[len(last_line.rstrip("\r\n")):]
            for u in range(first_u, last_u + 1):
                self.texts[u] = ""
            if need_pass:
                self.texts[first_u] = prefix + "pass" + eol
            return
        # Edit inside the logical line (one unit): keep the surviving statements.
        assert first_u == last_u, "a statement chain is one logical line"
        if kept:
            pieces = []
            for pos, i in enumerate(kept):
                pieces.append(cur.text[slice(*cur.span(chain[i]))])
                if pos + 1 < len(kept):
                    sep_from = cur.span(chain[i])[1]
                    sep_to = cur.span(chain[i + 1])[0]
                    pieces.append(cur.text[sep_from:sep_to])
            new = "".join(pieces)
        else:
            new = "pass"
        base = cur.starts[unit.first - 1]
        text = self.texts.get(first_u, unit.text)
        self.texts[first_u] = text[: start - base] + new + text[end - base:]
