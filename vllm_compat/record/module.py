"""The text of a patch module that ``record`` writes, and reading it back.

The module is written for people: one ``register(Patch(...), __name__)`` per patched package,
the files as constants, code as indented raw strings where that spells it exactly (the
transform dedents and strips what it is given), and TODO lines for what only a person knows.
It is read back with :func:`declared` and compared with the edits that were checked, so a
rendering mistake can never reach a catalog.
"""

from __future__ import annotations

import keyword
import re
import textwrap
from dataclasses import fields, replace

from ..catalog.patch import Edit, Patch, forget, registered

__all__ = ["TODO", "declared", "render", "same_edits"]

TODO = {
    "title": "TODO: what this fixes, in one line",
    "why": "TODO: why the hand edit is needed (the error it fixes)",
    "upstream": "TODO: the upstream change it answers (release, file, commit)",
    "remove_when": "TODO: when it can go (the upstream release that fixes it)",
}
_INDENT = " " * 12


def _lit(text: str) -> str:
    """A literal for ``text`` (code, as an edit states it) that reads well in the module."""
    if "\n" not in text:
        return repr(text)
    if "'''" in text or any((c < " " and c not in "\n\t") or c in "\x7f\u2028\u2029" for c in text):
        return repr(text)
    return "r'''\n" + textwrap.indent(text, _INDENT) + "\n" + _INDENT[:-4] + "'''"


def _constant(rel: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", rel.rsplit("/", 1)[-1].removesuffix(".py")).upper().strip("_") or "FILE"
    name = base if not base[0].isdigit() and not keyword.iskeyword(base.lower()) else f"FILE_{base}"
    i = 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def render(name: str, patches: list[Patch], summary: str) -> str:
    """The module declaring ``patches`` (local ids, their ``after`` as a catalog module writes
    them); ``summary`` says what they were recorded from."""
    kinds = sorted({type(e).__name__ for p in patches for e in p.edits})
    files: dict[str, str] = {}
    taken: set[str] = set()
    for p in patches:
        for e in p.edits:
            if e.file not in files:
                files[e.file] = _constant(e.file, taken)
    out = [f'"""{TODO["title"]}', "", *textwrap.wrap(summary, 92), '"""', "",
           f"from vllm_compat.patch import {', '.join([*kinds, 'Patch', 'register'])}", ""]
    out += [f"{const} = {rel!r}" for rel, const in files.items()]
    for p in patches:
        out += ["", "register(Patch(", f"    id={p.id!r},"]
        out += [f"    {f}={getattr(p, f)!r}," for f in ("title", "target", "target_versions", "why", "upstream", "remove_when")]
        if p.requires:
            out.append(f"    requires={p.requires!r},")
        if p.after:
            out.append(f"    after={p.after!r},")
        out.append("    edits=(")
        for e in p.edits:
            out += [f"        {type(e).__name__}(", f"            {files[e.file]}, {e.scope!r},"]
            for f in fields(e):
                value = getattr(e, f.name)
                if f.name not in ("file", "scope") and value != f.default:
                    out.append(f"            {f.name}={_lit(value) if isinstance(value, str) else repr(value)},")
            out.append("        ),")
        out += ["    ),", "), __name__)"]
    return "\n".join(out) + "\n"


def declared(text: str, filename: str) -> list[Patch]:
    """The patches a module's text registers (run in a scratch namespace, then forgotten)."""
    module = f"_vllm_compat_record_{abs(hash(filename))}"
    forget(module)
    exec(compile(text, filename, "exec"), {"__name__": module, "__file__": filename})  # noqa: S102 - our own text
    found = [p for p in registered() if p.module == module]
    forget(module)
    return found


def _norm(edit: Edit) -> Edit:
    return replace(edit, **{f.name: textwrap.dedent(getattr(edit, f.name)).strip() for f in fields(edit)
                            if f.name not in ("file", "scope") and isinstance(getattr(edit, f.name), str)})


def same_edits(a: Patch, b: Patch) -> bool:
    """Whether two patches carry the same edits as the transform reads them."""
    return [_norm(e) for e in a.edits] == [_norm(e) for e in b.edits]
