"""The config reference (docs/eagle3-config.md, through ``scripts/docs_gen.py``): one table per
section, rendered from the schema, so the page cannot disagree with what ``eagle3 run`` checks."""

from __future__ import annotations

from .keys import COMMANDS, REQUIRED, SECTIONS
from .schema import Key, toml_text


def _flags() -> dict[tuple[str, str], list[str]]:
    """(section, key) -> the commands that take it as a flag."""
    out: dict[tuple[str, str], list[str]] = {}
    for command, groups in COMMANDS.items():
        for _title, section, names in groups:
            for name in names:
                out.setdefault((section, name), []).append(command)
    return out


def _row(section: str, k: Key, commands: list[str]) -> str:
    default = "required" if not section and k.name in REQUIRED else \
        "–" if k.default is None else f"`{toml_text(k.default)}`"
    flag = ", ".join(f"`eagle3 {c} {k.option}`" for c in commands) or "–"
    value, meaning = (text.replace("|", "\\|") for text in (k.expected, k.help))
    return f"| `{k.name}` | {value} | {default} | {flag} | {meaning} |"


def reference() -> str:
    flags, parts = _flags(), []
    for section, keys in SECTIONS.items():
        parts.append(f"**{'[' + section + ']' if section else 'top level'}**\n")
        parts.append("| key | value | default | flag | meaning |\n|---|---|---|---|---|")
        parts.extend(_row(section, k, flags.get((section, k.name), [])) for k in keys)
        parts.append("")
    return "\n".join(parts).rstrip("\n")
