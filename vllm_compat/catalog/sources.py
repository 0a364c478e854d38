"""Which catalogs are in use, and the digest that tells whether they or the engine changed.

Import-free (``os`` and ``hashlib``; ``json`` where a caller already has it): the fast path of
``verify`` runs this on every call.  The catalogs, in this order: the built-in one
(``patches/``), every ``--catalog DIR``, the ``catalogs`` of ``[tool.vllm-compat]`` in the
nearest ``pyproject.toml`` (from the working directory up; paths relative to that file), and
the package folders that distributions installed in the target site-packages name through a
``vllm_compat.catalogs`` entry point (read from their ``entry_points.txt``, never through
``importlib.metadata``).  A catalog's name is its namespace: the ids of a user catalog's
patches read ``NAME:ID``; the built-in ids are unqualified.
"""

from __future__ import annotations

import hashlib
import os

BUILTIN = "built-in"
GROUP = "vllm_compat.catalogs"
_HERE = os.path.dirname(os.path.abspath(__file__))
_ENGINE = os.path.dirname(_HERE)  # vllm_compat/
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class SourceError(Exception):
    """A catalog cannot be found or read (exit 16), or two of them collide (``invalid``: exit 15)."""

    def __init__(self, message: str, invalid: bool = False) -> None:
        super().__init__(message)
        self.invalid = invalid


class Source:
    """One catalog in use: its name (namespace), its folder, and what named it."""

    __slots__ = ("name", "root", "origin")  # a plain class: dataclasses cost an import here

    def __init__(self, name: str, root: str, origin: str) -> None:
        self.name, self.root, self.origin = name, root, origin

    def __repr__(self) -> str:
        return f"Source({self.name!r}, {self.root!r}, {self.origin!r})"

    def describe(self) -> str:
        return "the built-in catalog" if self.name == BUILTIN else f"catalog {self.name!r} ({self.root}, from {self.origin})"


def builtin_root() -> str:
    return os.path.join(os.path.dirname(_ENGINE), "patches")


# -- digests ----------------------------------------------------------------------------------

def _hash_tree(h, root: str) -> None:
    """Every ``.py`` file under ``root``, walked in sorted order, by relative path and content."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    h.update(os.path.relpath(path, root).encode() + b"\0" + fh.read() + b"\0")


def tree_digest(root: str) -> str:
    """Content hash of every ``.py`` file under ``root`` (patch modules and shims)."""
    h = hashlib.sha256()
    _hash_tree(h, root)
    return h.hexdigest()


def engine_digest() -> str:
    """Hash of the transform semantics: the source of the edit declarations (``patch.py``) and
    of every module of the ``transform/`` package, in sorted order.  A release of vllm-compat
    that changes any of them marks every site patched by the old engine ``pending``."""
    h = hashlib.sha256()
    with open(os.path.join(_HERE, "patch.py"), "rb") as fh:
        h.update(b"patch.py\0" + fh.read() + b"\0")
    h.update(b"transform/\0")
    _hash_tree(h, os.path.join(_ENGINE, "transform"))
    return h.hexdigest()


def digest(sources: list[Source]) -> tuple[str, dict]:
    """The combined digest a manifest records, and its parts (for saying what changed)."""
    parts = {"engine": engine_digest(), "catalogs": {s.name: tree_digest(s.root) for s in sources}}
    h = hashlib.sha256(b"engine\0" + parts["engine"].encode())
    for s in sources:  # in order: the order of the catalogs decides ties in patch order
        h.update(b"\0" + s.name.encode() + b"\0" + parts["catalogs"][s.name].encode())
    return h.hexdigest(), parts


# -- discovery ----------------------------------------------------------------------------------

def _checked_name(name: str, origin: str) -> str:
    if not name or name == BUILTIN or not set(name) <= _NAME_CHARS:
        raise SourceError(f"bad catalog name {name!r} (from {origin}): use letters, digits, '_', '.', '-'", invalid=True)
    return name


def _folder(path: str, origin: str, missing_ok: tuple[str, ...] = ()) -> Source:
    root = os.path.abspath(path)
    if not os.path.isdir(root) and root not in missing_ok:
        raise SourceError(f"catalog folder {root} does not exist (named by {origin})")
    return Source(_checked_name(os.path.basename(os.path.normpath(root)), origin), root, origin)


def nearest_pyproject(cwd: str) -> str | None:
    here = os.path.abspath(cwd)
    while True:
        path = os.path.join(here, "pyproject.toml")
        if os.path.isfile(path):
            return path
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _toml_strings(text: str) -> list[str] | None:
    """The strings of a TOML array of plain strings (``["a", 'b']``, over several lines,
    with comments), or ``None`` for anything else."""
    out, i, n = [], 0, len(text)
    if not text.startswith("["):
        return None
    i = 1
    while i < n:
        c = text[i]
        if c in " \t\r\n,":
            i += 1
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == "]":
            return out
        elif c in "\"'":
            end = text.find(c, i + 1)
            if end < 0 or (c == '"' and "\\" in text[i:end]):
                return None
            out.append(text[i + 1 : end])
            i = end + 1
        else:
            return None
    return None


def _mini_catalogs(text: str) -> list[str] | None:
    """``[tool.vllm-compat] catalogs`` read without a TOML parser (the fast path; a misread
    only makes the digest differ, so the full path answers)."""
    table = ""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("["):
            table = s.split("#", 1)[0].strip().strip("[]").replace(" ", "").replace('"', "").replace("'", "")
        elif table == "tool.vllm-compat" and s.startswith("catalogs") and s[8:].lstrip().startswith("="):
            return _toml_strings("\n".join([s.split("=", 1)[1].strip(), *lines[i + 1 :]]))
    return []


def pyproject_catalogs(path: str, exact: bool) -> list[str]:
    """The catalog folders a ``pyproject.toml`` names (``exact``: parsed with tomllib)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"cannot read {path}: {exc}") from None
    if "vllm-compat" not in text:
        return []
    if not exact:
        found = _mini_catalogs(text)
        if found is None:
            raise SourceError(f"{path}: [tool.vllm-compat] catalogs is not a list of strings")
        return found
    try:
        import tomllib  # noqa: PLC0415 - the full path only (it costs more than verify may take)
    except ImportError:  # Python 3.10
        found = _mini_catalogs(text)
        if found is None:
            raise SourceError(f"{path}: [tool.vllm-compat] catalogs is not a list of strings") from None
        return found
    try:
        table = tomllib.loads(text).get("tool", {}).get("vllm-compat", {})
    except tomllib.TOMLDecodeError as exc:
        raise SourceError(f"{path} is not valid TOML: {exc}") from None
    found = table.get("catalogs", []) if isinstance(table, dict) else None
    if not isinstance(found, list) or not all(isinstance(x, str) for x in found):
        raise SourceError(f"{path}: [tool.vllm-compat] catalogs is not a list of strings")
    return found


def _section(text: str, group: str) -> list[tuple[str, str]]:
    out, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("["):
            inside = s.strip("[] ") == group
        elif inside and "=" in s and not s.startswith(("#", ";")):
            key, value = s.split("=", 1)
            out.append((key.strip(), value.strip()))
    return out


def scan_entry_points(site: str) -> list[list[str]]:
    """``[[name, value, dist-info], ...]`` of every ``vllm_compat.catalogs`` entry point."""
    found = []
    for name in sorted(os.listdir(site)):
        if name.endswith(".dist-info"):
            try:
                with open(os.path.join(site, name, "entry_points.txt"), encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            if GROUP in text:
                found += [[ep, value, name] for ep, value in _section(text, GROUP)]
    return found


def _path_entries(site: str) -> list[str]:
    """Folders the site's ``.pth`` files put on ``sys.path`` (editable installs)."""
    out = []
    for name in sorted(os.listdir(site)):
        if name.endswith(".pth"):
            try:
                with open(os.path.join(site, name), encoding="utf-8", errors="replace") as fh:
                    lines = fh.read().splitlines()
            except OSError:
                continue
            out += [os.path.join(site, s.strip()) for s in lines
                    if s.strip() and not s.startswith(("#", "import ", "import\t"))]
    return out


def _entry_point(site: str, name: str, value: str, dist_info: str) -> Source:
    origin = f"entry point {name!r} of {dist_info}"
    parts = value.split(".")
    if not value or not all(p.isidentifier() for p in parts):
        raise SourceError(f"{origin}: {value!r} must name a package (a dotted module path, no ':attr')")
    for base in (site, *_path_entries(site)):
        root = os.path.join(base, *parts)
        if os.path.isdir(root):
            return Source(_checked_name(name, origin), root, origin)
    raise SourceError(f"{origin} names {value}, which is not a package folder in {site}")


def discover(site: str, extra: tuple[str, ...] | list[str] = (), cwd: str | None = None,
             cached: dict | None = None, exact: bool = False,
             missing_ok: tuple[str, ...] = ()) -> tuple[list[Source], dict]:
    """The catalogs in use for ``site``, in order, and the entry-point scan to cache
    (``missing_ok``: folders that may not exist yet, the one `record` writes into).

    ``cached`` is the scan a manifest recorded: reused while the site folder's mtime is the
    one it was taken at (installing or removing a distribution changes it), which saves
    reading every ``entry_points.txt`` of the site on the fast path."""
    out = [Source(BUILTIN, builtin_root(), "vllm-compat")]
    for d in extra:
        out.append(_folder(d, f"--catalog {d}", missing_ok))
    pyproject = nearest_pyproject(cwd or os.getcwd())
    if pyproject is not None:
        base = os.path.dirname(pyproject)
        for d in pyproject_catalogs(pyproject, exact):
            out.append(_folder(os.path.join(base, d), f"{pyproject} [tool.vllm-compat] catalogs", missing_ok))
    mtime = os.stat(site).st_mtime_ns
    if cached is not None and cached.get("mtime") == mtime:
        found = cached["found"]
    else:
        found = scan_entry_points(site)
    out += [_entry_point(site, *ep) for ep in found]
    return _unique(out), {"mtime": mtime, "found": found}


def _unique(sources: list[Source]) -> list[Source]:
    """One source per folder (named twice is fine); one folder per name."""
    seen: dict[str, Source] = {}
    by_name: dict[str, Source] = {}
    out = []
    for s in sources:
        real = os.path.realpath(s.root)
        if real in seen:
            continue
        other = by_name.get(s.name)
        if other is not None:
            raise SourceError(f"two catalogs are named {s.name!r}: {other.root} (from {other.origin}) and "
                              f"{s.root} (from {s.origin}); their patch ids would collide", invalid=True)
        seen[real] = by_name[s.name] = s
        out.append(s)
    return out
