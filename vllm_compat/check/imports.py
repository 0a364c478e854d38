"""The imports of a checked file: does each vLLM (or own-package) import resolve, and what
does it bind?  ``try``/``except ImportError`` and ``if``/``else`` alternatives count as one
fallback chain that is fine when one branch resolves completely."""

from __future__ import annotations

import ast

from .objects import _Mod, _Obj, _Opaque, _is_vllm, _is_vllm_def
from .scopes import _Scope
from .syntax import _catches, _is_type_checking

_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


class _ImportChecks:
    """The import checks of :class:`.walker._FileChecker`."""

    def _block_imports(self, stmts: list[ast.stmt], scope: _Scope
                       ) -> tuple[list[tuple], list[tuple[str, list[_Obj] | None]]]:
        failures: list[tuple] = []
        bindings: list[tuple[str, list[_Obj] | None]] = []
        for st in stmts:
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                f, b = self._import(st, scope)
                failures += f
                bindings += b
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            elif isinstance(st, ast.ClassDef):
                f, b = self._block_imports(st.body, scope)
                failures += f
                bindings += b
            elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
                guarded = [h for h in st.handlers if _catches(h, _IMPORT_ERRORS)]
                bf, bb = self._block_imports(st.body, scope)
                if guarded and bf:
                    chosen = None
                    alt_failures: list[tuple] = []
                    for h in guarded:
                        hf, hb = self._block_imports(h.body, scope)
                        if not hf:
                            chosen = hb
                            break
                        alt_failures += hf
                    if chosen is not None:
                        bindings += [b for b in bb if b[1] is not None] + chosen
                    else:
                        failures += bf + alt_failures
                        bindings += bb
                else:
                    failures += bf
                    bindings += bb
                    for h in st.handlers:
                        if h in guarded:
                            continue  # not executed when the body imports fine
                        hf, hb = self._block_imports(h.body, scope)
                        failures += hf
                        bindings += hb
                for part in (st.orelse, st.finalbody):
                    f, b = self._block_imports(part, scope)
                    failures += f
                    bindings += b
            elif isinstance(st, ast.If):
                if _is_type_checking(st.test):
                    f, b = self._block_imports(st.orelse, scope)
                    failures += f
                    bindings += b
                    continue
                bf, bb = self._block_imports(st.body, scope)
                ef, eb = self._block_imports(st.orelse, scope)
                if st.orelse and bb and eb and (not bf or not ef):
                    # alternatives: one branch resolving completely is enough
                    bindings += (bb if not bf else eb) + [
                        x for x in (eb if not bf else bb) if x[1] is not None]
                else:
                    failures += bf + ef
                    bindings += bb + eb
            elif isinstance(st, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                f, b = self._block_imports(st.body + list(getattr(st, "orelse", [])), scope)
                failures += f
                bindings += b
            elif type(st).__name__ == "Match":
                for case in st.cases:  # type: ignore[attr-defined]
                    f, b = self._block_imports(case.body, scope)
                    failures += f
                    bindings += b
        return failures, bindings

    def _is_local(self, name: str) -> bool:
        """A module of the package the checked files belong to (``speculators``): imports
        from it are resolved too, so a vLLM name re-exported by a vendored shim is still
        bound at its call sites, and a name the shim lacks is reported."""
        top = name.split(".")[0]
        return top in self.local_packages and self.index.module(top) is not None

    def _absolute(self, st: ast.ImportFrom) -> str:
        if not st.level:
            return st.module or ""
        if not self.modname:
            return ""
        base = self.modname if self.is_pkg else self.modname.rpartition(".")[0]
        for _ in range(st.level - 1):
            base = base.rpartition(".")[0]
        if not base:
            return ""
        return f"{base}.{st.module}" if st.module else base

    def _import(self, st: ast.Import | ast.ImportFrom, scope: _Scope
                ) -> tuple[list[tuple], list[tuple[str, list[_Obj] | None]]]:
        failures: list[tuple] = []
        bindings: list[tuple[str, list[_Obj] | None]] = []
        idx = self.index
        if isinstance(st, ast.Import):
            for a in st.names:
                if not (_is_vllm(a.name) or self._is_local(a.name)):
                    continue
                mod = idx.module(a.name)
                top = a.name.split(".")[0]
                if mod is None:
                    failures.append((st, "unresolved-import", _no_module(a.name)))
                    bindings.append((a.asname or top, None))
                elif a.asname:
                    bindings.append((a.asname, [_Mod(mod)]))
                else:
                    topmod = idx.module(top)
                    bindings.append((top, [_Mod(topmod)] if topmod else None))
            return failures, bindings
        absolute = self._absolute(st)
        vllm = _is_vllm(absolute)
        if not absolute or not (vllm or self._is_local(absolute)):
            return failures, bindings
        mod = idx.module(absolute)
        if mod is None:
            failures.append((st, "unresolved-import", _no_module(absolute)))
            for a in st.names:
                bindings.append((a.asname or a.name, None))
            return failures, bindings
        for a in st.names:
            if a.name == "*":
                continue
            found = idx.lookup(mod, a.name)
            if not found:
                extra = " (bound only under TYPE_CHECKING)" if a.name in mod.type_only else ""
                failures.append((st, "unresolved-import",
                                 f"cannot import name '{a.name}' from '{absolute}' "
                                 f"({mod.rel}){extra}"))
                bindings.append((a.asname or a.name, None))
            elif vllm:
                bindings.append((a.asname or a.name, found))
            else:  # from the checked package: only what leads into vLLM matters
                keep = [o for o in found if isinstance(o, _Mod) or _is_vllm_def(o)]
                bindings.append((a.asname or a.name, keep or [_Opaque("local")]))
        return failures, bindings


def _no_module(name: str) -> str:
    return f"No module named '{name}'"
