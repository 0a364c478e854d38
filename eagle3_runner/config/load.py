"""``eagle3 run``'s config file: read, every key checked against the schema before any step
runs (a wrong key, type or value: one line, exit 2; a file that is not TOML: exit 3), paths
made relative to the file's folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import BadInput, UsageError
from .keys import REQUIRED, SECTIONS, key
from .schema import BadValue, nearest, toml_text


@dataclass
class PipelineConfig:
    workdir: Path
    model: Path
    data: Path | list[Path]
    seq_length: int = key("prepare", "seq_length").default
    extract: dict[str, Any] = field(default_factory=dict)
    vocab: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    serve_check: dict[str, Any] = field(default_factory=dict)
    prepare: dict[str, Any] = field(default_factory=dict)  # [prepare] beyond data and seq_length

    @property
    def tokens(self) -> Path:
        return self.workdir / "tokens.jsonl"

    @property
    def hidden_states(self) -> Path:
        return self.workdir / "hidden_states"

    @property
    def vocab_dir(self) -> Path:
        return self.workdir / "vocab"

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"


def _toml_load(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(f"{path}: not valid TOML: {exc}") from None


def _unknown(name: str, known: list[str], where: str) -> UsageError:
    near = nearest(name, known)
    hint = f"did you mean {near}?" if near else f"known: {', '.join(known)}"
    return UsageError(f"{where}{name}: unknown key; {hint}")


def check_config(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every section and key of a parsed config checked against the schema; the values as kept,
    by section (``""``: the top level).  The first problem raises :class:`UsageError`, one line."""
    out: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    sections = [s for s in SECTIONS if s]
    for name, value in raw.items():
        if name in sections:
            if not isinstance(value, dict):
                raise UsageError(f"{name} = {toml_text(value)}: expected a table ([{name}])")
            out[name] = _check_table(name, value)
        elif name in (k.name for k in SECTIONS[""]):
            out[""].update(_check_table("", {name: value}))
        elif isinstance(value, dict):
            near = nearest(name, sections)
            raise UsageError(f"[{name}]: unknown section; " +
                             (f"did you mean [{near}]?" if near else f"known: {', '.join(sections)}"))
        else:
            raise _unknown(name, [k.name for k in SECTIONS[""]] + sections, "")
    for name in REQUIRED:
        if name not in raw:
            raise UsageError(f"{name} is required (see eagle3 run --example-config)")
    if "data" not in out["prepare"] and "synthesize" not in out["prepare"]:
        raise UsageError("[prepare] needs data, synthesize, or both")
    return out


def _check_table(section: str, table: dict[str, Any]) -> dict[str, Any]:
    keys = {k.name: k for k in SECTIONS[section]}
    where = f"[{section}] " if section else ""
    kept = {}
    for name, value in table.items():
        if name not in keys:
            raise _unknown(name, list(keys), where)
        try:
            kept[name] = keys[name].check(value)
        except BadValue as exc:
            raise UsageError(f"{where}{name} = {toml_text(value)}: {exc}") from None
    return kept


def load_config(path: Path) -> PipelineConfig:
    values = check_config(_toml_load(path))
    base = Path(path).absolute().parent
    top, prep = values[""], dict(values["prepare"])
    data = prep.pop("data", [])
    for name in ("chat_template", "synthesize_starts"):  # a file relative to the config; else a built-in name
        if prep.get(name) and (base / prep[name]).is_file():
            prep[name] = str(base / prep[name])
    return PipelineConfig(
        workdir=base / top["workdir"], model=base / top["model"],
        data=base / data if isinstance(data, str) else [base / d for d in data],
        seq_length=prep.pop("seq_length", PipelineConfig.seq_length), prepare=prep,
        extract=values["extract"], vocab=values["vocab"], train=values["train"], serve_check=values["serve_check"],
    )


def example_config() -> str:
    """A complete, commented CONFIG.toml (``eagle3 run --example-config``)."""
    from importlib import resources

    return resources.files("eagle3_runner").joinpath("templates", "example.toml").read_text(encoding="utf-8")
