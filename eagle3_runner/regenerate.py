"""The documented import path of ``regenerate`` before the runner was grouped by stage (kept for
users' scripts): the module is :mod:`eagle3_runner.prepare.regenerate`."""

from .prepare.regenerate import RegenerateOptions, RegenerateResult, regenerate

__all__ = ["RegenerateOptions", "RegenerateResult", "regenerate"]
