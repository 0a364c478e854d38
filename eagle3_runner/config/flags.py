"""The stage commands' flags, built from the config's keys (:mod:`.keys`): the same types,
bounds, choices, defaults and help, and the same checks, as ``eagle3 run``'s config."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .keys import COMMANDS, SECTIONS, key
from .schema import BOOL, PATHS, Key


def add_flag(parser: Any, k: Key, **overrides: Any) -> None:
    """``k`` as an argparse option (``dest`` is the key's name); ``overrides`` for a command
    that uses it differently (``eagle3 run --tiny --steps``)."""
    default = k.default if k.cli_default is ... else k.cli_default
    if k.kind is BOOL:
        kw: dict[str, Any] = dict(action="store_true")
    elif k.kind is PATHS:
        kw = dict(action="append", type=Path, metavar="PATH")
    else:
        kw = dict(type=k.from_text, default=default,
                  metavar="{" + ",".join(k.choices) + "}" if k.choices else k.option[2:].upper().replace("-", "_"))
    shown = "" if default is None or k.kind is BOOL else \
        f" (default {default:g})" if isinstance(default, float) else f" (default {default})"
    kw["help"] = (k.help + shown).replace("%", "%%")
    kw.update(overrides)
    parser.add_argument(k.option, dest=k.name, **kw)


def add_command_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """Every config key ``command`` takes, as flags (in their help groups)."""
    groups: dict[str, Any] = {}
    for title, section, names in COMMANDS[command]:
        target = parser if title is None else groups.setdefault(title, parser.add_argument_group(title))
        for name in names:
            add_flag(target, key(section, name))


def flag_values(args: argparse.Namespace, section: str, *, leave: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values the command line gave for ``section``'s keys (its defaults included)."""
    return {k.name: getattr(args, k.name) for k in SECTIONS[section]
            if k.name not in leave and hasattr(args, k.name)}
