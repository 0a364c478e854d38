"""Exit codes and the error type that carries one (the CLI maps errors to exit codes)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of ``eagle3`` (listed in ``eagle3 --help``)."""

    OK = 0
    USAGE = 2  # bad command line / a config key or value the schema refuses
    BAD_INPUT = 3  # malformed input data (chat rows, token rows, frequency file, a config that is not TOML)
    PATCH_STATE = 4  # the speculators site's patch state does not verify
    BAD_SAMPLES = 5  # some samples failed validation and were not written (others were)
    ENVIRONMENT = 6  # a needed package / model / device is missing or unusable
    MISMATCH = 7  # serving with the draft changed the verifier's greedy output, or acceptance disagrees


EXIT_CODES_HELP = """exit codes:
  0  ok
  2  usage error: bad arguments, or a config key or value the schema refuses
  3  bad input data (malformed chat/token rows, frequency file, a config that is not TOML;
     the line is named)
  4  the speculators site's vllm-compat patch state does not verify (the fix is printed)
  5  some samples failed validation (non-finite or inconsistent states) and were not
     written; all other samples were written
  6  environment: a package, model or device the step needs is missing or unusable (a model
     folder missing, empty, or without config.json or tokenizer files)
  7  serve-check: vLLM's output with the draft differs from the verifier's without it (or
     `run` with a [serve_check] tolerance: served acceptance disagrees with the offline one)
with --json (eval, serve-check), an error is one JSON object on stdout: exit_code, result, error
"""


class RunnerError(Exception):
    """A step could not complete; ``code`` is the process exit code it maps to."""

    def __init__(self, message: str, code: ExitCode, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint


class BadInput(RunnerError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.BAD_INPUT, hint)


class EnvironmentProblem(RunnerError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.ENVIRONMENT, hint)


class UsageError(RunnerError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, ExitCode.USAGE, hint)
