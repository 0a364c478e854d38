"""What the static check reports: findings, and the report of one run."""

from __future__ import annotations

from dataclasses import dataclass

PRAGMA = "vllm-compat: ignore"


@dataclass(frozen=True)
class Finding:
    file: str  # path as given
    line: int
    kind: str  # "unresolved-import" | "bad-call" | "missing-attribute" | "bad-override" | "syntax-error"
    message: str


@dataclass(frozen=True)
class CheckReport:
    findings: tuple[Finding, ...]
    files_checked: int
    calls_checked: int  # vLLM calls bound to a signature (so a vacuous pass is visible)
    calls_skipped: int = 0  # vLLM calls seen but not bound (unpacking, guards, unknown targets)
    files: tuple[str, ...] = ()  # the files checked, as given
    notes: tuple[str, ...] = ()  # facts worth a line that are not findings (a dead constant preference)

    @property
    def ok(self) -> bool:
        return not self.findings
