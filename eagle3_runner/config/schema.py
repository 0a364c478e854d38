"""The typed schema of ``eagle3 run``'s config: what a key is (:class:`Key`), what its values may
be (:class:`Kind` and bounds), and the one-line refusals.  The keys themselves are in
:mod:`.keys`; the command-line flags of the stage commands are built from the same keys
(:mod:`.flags`), so a value is checked the same way wherever it comes from."""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


class BadValue(ValueError):
    """A value its key does not accept; the message says what is expected."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int_from(text: str) -> int:
    return int(text)


def _bool_from(text: str) -> bool:
    words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if text.lower() not in words:
        raise ValueError(text)
    return words[text.lower()]


def _layers_ok(v: Any) -> bool:
    if isinstance(v, str):
        return all(part.strip().lstrip("-").isdigit() for part in v.split(",")) and bool(v.strip())
    return isinstance(v, list) and bool(v) and all(_is_int(x) for x in v)


def _shard_ok(v: Any) -> bool:
    if not isinstance(v, str) or v.count("/") != 1:
        return False
    i, n = v.split("/")
    return i.strip().isdigit() and n.strip().isdigit() and 0 <= int(i) < int(n)


def _paths_ok(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v))


@dataclass(frozen=True)
class Kind:
    """A type of value: how it is described, which TOML values it takes, how a command-line
    string becomes one, and the value it is kept as (an int given to a float key: a float)."""

    expected: str
    accepts: Callable[[Any], bool]
    parse: Callable[[str], Any] = str
    keep: Callable[[Any], Any] = lambda v: v
    wrong: Any = 3.5  # a value of another type, for the schema's own test


INT = Kind("an integer", _is_int, _int_from, wrong="many")
FLOAT = Kind("a number", _is_number, float, float, wrong="fast")
BOOL = Kind("true or false", lambda v: isinstance(v, bool), _bool_from, wrong="yes")
TEXT = Kind("a string", lambda v: isinstance(v, str))
PATH = Kind("a path (a string)", lambda v: isinstance(v, str))
PATHS = Kind("a path or a list of paths", _paths_ok)
LAYERS = Kind('layer ids: a list of integers or "a,b,c"', _layers_ok)
SHARD = Kind('"I/N" with 0 <= I < N', _shard_ok)


@dataclass(frozen=True)
class Key:
    """One config key (``[section] name``) and, unless ``flag`` is None, its command-line flag."""

    name: str
    kind: Kind
    help: str
    default: Any = None  # None: derived at run time (``help`` says how)
    choices: tuple[str, ...] = ()
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself refused
    flag: str | None = ""  # "": --name-with-dashes; None: config only
    cli_default: Any = ...  # ...: the same as ``default``

    @property
    def option(self) -> str | None:
        return None if self.flag is None else self.flag or "--" + self.name.replace("_", "-")

    @property
    def expected(self) -> str:
        if self.choices:
            return "one of " + ", ".join(json.dumps(c) for c in self.choices)
        text = self.kind.expected
        if self.low is not None and self.high is not None:
            return f"{text} in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        if self.low is not None:
            return f"{text} {'>' if self.low_open else '>='} {self.low:g}"
        return text

    def check(self, value: Any) -> Any:
        """``value`` as kept, or :class:`BadValue` saying what is expected."""
        if not self.kind.accepts(value) or (self.choices and value not in self.choices):
            raise BadValue(f"expected {self.expected}")
        value = self.kind.keep(value)
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise BadValue(f"expected {self.expected}")
        if self.high is not None and value > self.high:
            raise BadValue(f"expected {self.expected}")
        return value

    def from_text(self, text: str) -> Any:
        """A command-line string as this key's value (argparse's ``type``; its error, exit 2)."""
        import argparse

        try:
            return self.check(self.kind.parse(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected {self.expected}") from None

    def wrong_value(self) -> Any:
        """A value of the wrong type or out of range, for the schema's own test."""
        return 7 if self.choices else self.kind.wrong


def toml_text(value: Any) -> str:
    """A value as TOML writes it (for messages: what was given)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def nearest(name: str, known: Iterable[str]) -> str | None:
    """The known name a typo most likely meant, if any is close."""
    found = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return found[0] if found else None
