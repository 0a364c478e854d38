"""A parsed source: physical lines, logical-line units (found with :mod:`tokenize`) and the
statement tree (:mod:`ast`), with the offsets that map one onto the other."""

from __future__ import annotations

import ast
import io
import textwrap
import tokenize
from dataclasses import dataclass

from .results import StripError


def _split_lines(text: str) -> list[str]:
    """Physical lines with their endings, split on ``\\n`` only (as tokenize and ast do)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


@dataclass
class _Unit:
    first: int  # 1-based first physical line
    last: int  # 1-based last physical line
    text: str
    trivia: bool  # blank or comment-only line


class _Source:
    """A parsed source: lines, logical-line units, statement tree."""

    def __init__(self, text: str, what: str):
        self.text = text
        try:
            self.tree = ast.parse(text)
        except SyntaxError as exc:
            line = exc.lineno or 0
            raise StripError(f"{what} source has a syntax error at line {line}: {exc.msg}",
                             line) from exc
        except ValueError as exc:  # null bytes (Python < 3.12)
            line = text.count("\n", 0, max(text.find("\0"), 0)) + 1
            raise StripError(f"{what} source cannot be parsed at line {line}: {exc}",
                             line) from exc
        self.lines = _split_lines(text)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.units = self._units(what)
        self.unit_of_line = [0] * (len(self.lines) + 2)
        for i, u in enumerate(self.units):
            for ln in range(u.first, u.last + 1):
                self.unit_of_line[ln] = i
        # statements starting in each unit
        self.unit_stmts: list[list[ast.stmt]] = [[] for _ in self.units]
        for node in ast.walk(self.tree):
            if isinstance(node, ast.stmt):
                self.unit_stmts[self.unit_of_line[node.lineno]].append(node)

    def _units(self, what: str) -> list[_Unit]:
        logical: dict[int, int] = {}
        start = None
        skip = {tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENDMARKER, tokenize.ENCODING}
        try:
            for tok in tokenize.generate_tokens(io.StringIO(self.text).readline):
                if tok.type in skip:
                    continue
                if tok.type == tokenize.NEWLINE:
                    if start is not None:
                        logical[start] = min(tok.start[0], len(self.lines))
                        start = None
                    continue
                if start is None:
                    start = tok.start[0]
        except (tokenize.TokenError, SyntaxError) as exc:  # pragma: no cover - ast caught it
            line = getattr(exc, "lineno", 0) or 0
            raise StripError(f"{what} source cannot be tokenized: {exc}", line) from exc
        if start is not None:  # pragma: no cover - tokenize always ends with NEWLINE
            logical[start] = len(self.lines)
        units = []
        ln = 1
        while ln <= len(self.lines):
            last = logical.get(ln)
            if last is None:
                text = self.lines[ln - 1]
                units.append(_Unit(ln, ln, text, True))
                ln += 1
            else:
                units.append(_Unit(ln, last, "".join(self.lines[ln - 1:last]), False))
                ln = last + 1
        return units

    def offset(self, line: int, col: int) -> int:
        """Absolute character offset of an ast (line, UTF-8 byte column) position."""
        text = self.lines[line - 1]
        return self.starts[line - 1] + len(text.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.stmt) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def code_units(self, node: ast.stmt) -> range:
        return range(self.unit_of_line[node.lineno], self.unit_of_line[node.end_lineno] + 1)

    def segment(self, node: ast.stmt) -> str:
        start, end = self.span(node)
        line_start = self.starts[node.lineno - 1]
        prefix = self.text[line_start:start]
        if prefix.strip():
            prefix = " " * len(prefix)
        return textwrap.dedent(prefix + self.text[start:end]).strip()
