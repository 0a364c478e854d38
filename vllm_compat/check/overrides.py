"""Methods a checked class overrides on a vLLM base (hs-connectors' connectors subclass
``KVConnectorBase_V1`` and ``ExampleHiddenStatesConnector``): vLLM calls them, so each must
still exist on the base and accept every call the base's own signature allows.

* an override must be of the same kind (instance, ``@staticmethod``, ``@classmethod``) and
  accept each of the base's parameters where the base takes it (same position, same keyword
  name; a default where the base has one); its own extra parameters need defaults;
* a method that no vLLM base defines, and that the checked file never calls or names itself,
  overrides nothing: vLLM never calls it (hs-connectors 0.9.0's FP8 ``_write_tensors`` on
  vLLM 0.18, whose connector writes the file itself).  A property that only returns a constant
  (a preference such as ``prefer_cross_layer_blocks``, which vLLM 0.29 stopped reading) is a
  note instead: nothing it did is left undone.

Dunder methods are left out (``__init__`` is the connector factory's contract).  A base outside
vLLM that is not ``object``/``ABC``/``Generic`` makes a missing method unknowable: nothing is
reported for it.
"""

from __future__ import annotations

import ast

from .binding import _Param, _Sig
from .classes import _TRIVIAL_BASES, _class_body_member
from .objects import _Class, _External, _is_vllm
from .syntax import _decorator_name


def _kind(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    names = {_decorator_name(d) for d in fn.decorator_list}
    for kind in ("staticmethod", "classmethod", "property", "cached_property"):
        if kind in names:
            return kind
    return "method"


def _constant(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The body is ``return <constant>`` (after a docstring)."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant)


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, rel: str, label: str) -> _Sig:
    return _Sig.from_def(fn, label, rel, drop_first=_kind(fn) != "staticmethod")


def override_problems(base: _Sig, over: _Sig) -> list[str]:
    """Why ``over`` cannot take every call ``base``'s signature allows (empty: it can)."""
    problems: list[str] = []
    has = {k: any(p.kind == k for p in over.params) for k in ("varpos", "varkw")}
    positional = [p for p in over.params if p.kind in ("po", "pk")]
    by_name = {p.name: p for p in over.params if p.kind in ("pk", "kw")}
    used: set[str] = set()
    base_positional = [p for p in base.params if p.kind in ("po", "pk")]
    for i, p in enumerate(base_positional):
        mine: _Param | None = positional[i] if i < len(positional) else None
        if mine is None and not has["varpos"]:
            problems.append(f"takes no positional argument {i + 1} ('{p.name}')")
            continue
        if mine is not None:
            used.add(mine.name)
            if p.kind == "pk" and mine.name != p.name and not has["varkw"]:
                problems.append(f"names argument {i + 1} '{mine.name}', vLLM's is '{p.name}' (passed by keyword)")
            if p.has_default and not mine.has_default:
                problems.append(f"requires '{mine.name}', which vLLM's leaves optional")
    for p in base.params:
        if p.kind == "kw":
            mine = by_name.get(p.name)
            if mine is None and not has["varkw"]:
                problems.append(f"takes no keyword argument '{p.name}'")
            elif mine is not None:
                used.add(mine.name)
                if p.has_default and not mine.has_default:
                    problems.append(f"requires '{mine.name}', which vLLM's leaves optional")
        elif p.kind in ("varpos", "varkw") and not has[p.kind]:
            problems.append(f"takes no {'*' if p.kind == 'varpos' else '**'}{p.name}")
    for mine in over.params:
        if mine.kind in ("po", "pk", "kw") and mine.name not in used and not mine.has_default:
            problems.append(f"requires '{mine.name}', which vLLM never passes")
    return problems


class _OverrideChecks:
    """The override checks of :class:`.walker._FileChecker` (for files overlaid on the index)."""

    def _check_overrides(self) -> None:
        module = self.index.overlay.get(self.modname)
        if module is None:
            return
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                self._check_class(_Class(module, node))

    def _check_class(self, cls: _Class) -> None:
        mro = self.index.mro(cls)[1:]
        vllm_bases = [c for c in mro if isinstance(c, _Class) and _is_vllm(c.module.name)]
        if not vllm_bases:
            return
        for fn in cls.node.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if fn.name.startswith("__") and fn.name.endswith("__"):
                continue
            where, found, knowable = None, None, True
            for c in mro:
                if isinstance(c, _Class):
                    found = _class_body_member(c, fn.name)
                    if found:
                        where = c
                        break
                elif not (isinstance(c, _External) and c.qualname in _TRIVIAL_BASES):
                    knowable = False
                    break
            if where is None:
                if knowable and not self._called_by_name(fn.name):
                    shown = ", ".join(f"{c.name} ({c.module.rel})" for c in vllm_bases)
                    if _kind(fn) in ("property", "cached_property") and _constant(fn):
                        self.notes.append(f"{self.path}:{fn.lineno}: {cls.name}.{fn.name} (a constant preference) "
                                          f"overrides nothing: no base defines it ({shown}), vLLM no longer reads it")
                    else:
                        self.report(fn, "bad-override", f"{cls.name}.{fn.name} overrides nothing: no base defines "
                                                        f"it ({shown}), so vLLM never calls it")
                continue
            if not _is_vllm(where.module.name) or not isinstance(found, ast.AST):
                continue  # a local base's method, or a property/attribute: no signature to compare
            self._compare(cls, fn, where, found)

    def _called_by_name(self, name: str) -> bool:
        """Whether the file uses ``name`` anywhere besides its own definitions."""
        return sum(1 for n in ast.walk(self.tree)
                   if (isinstance(n, ast.Attribute) and n.attr == name) or (isinstance(n, ast.Name) and n.id == name)
                   or (isinstance(n, ast.Constant) and n.value == name)) > 0

    def _compare(self, cls: _Class, fn, where: _Class, base_fn) -> None:
        label = f"{cls.name}.{fn.name}"
        mine, theirs = _kind(fn), _kind(base_fn)
        if mine != theirs:
            self.report(fn, "bad-override", f"{label} is a {mine}, vLLM's {where.name}.{fn.name} a {theirs} "
                                            f"({where.module.rel}:{base_fn.lineno})")
            return
        if mine in ("property", "cached_property"):
            return
        base = _signature(base_fn, where.module.rel, f"{where.name}.{fn.name}")
        for problem in override_problems(base, _signature(fn, self.path, label)):
            self.report(fn, "bad-override", f"{label} {problem} ({base.label} at {base.where})")
