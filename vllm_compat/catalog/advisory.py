"""The advisory declaration: a catalog entry that patches nothing and names a known-bad
combination of installed distributions, why it is bad, the upstream evidence and the fix.

A catalog module creates one :class:`Advisory` and passes it to :func:`register` (as a patch
module does with :func:`vllm_compat.catalog.patch.register`).  ``status`` and ``verify`` report
a matching advisory with exit 21 (``--allow-advisory ID`` accepts one); ``check --against``
reports those the release would bring; ``prove`` names one when the states it reads are wrong.

Plain data, like the patch declarations: loading a catalog never imports libcst.
"""

from __future__ import annotations

from dataclasses import dataclass

from .patch import Probe

__all__ = ["CONDITIONS", "Advisory", "forget", "register", "registered"]

# Runtime conditions an advisory may add to its version ranges: what the installed files cannot
# tell.  ``status`` reports such an advisory with the condition spelled out (the user accepts it
# with --allow-advisory where it does not hold); ``prove`` knows it for the model it runs.
CONDITIONS = {
    "hybrid-verifier": "the verifier is a hybrid model (linear-attention or Mamba layers beside attention: "
                       "Qwen3.5/3.6, Qwen3-Next)",
    "mooncake-backend": "hidden states go through hs-connectors' MooncakeHiddenStatesConnector "
                        "(launch_vllm.py --hidden-states-backend mooncake)",
    "fp8-connector": "hidden states go through hs-connectors' FP8HiddenStatesConnector",
}


@dataclass(frozen=True)
class Advisory:
    """A known-bad combination: every range of ``when`` holds for the installed versions (and
    every probe holds for the installed source), and ``condition`` (a key of
    :data:`CONDITIONS`) at run time where one is named."""

    id: str
    title: str
    when: dict[str, str]  # import package -> PEP 440 range, e.g. {"hs_connectors": "<0.8", "vllm": ">=0.29"}
    why: str  # what goes wrong, and how it shows (or does not)
    upstream: str  # the evidence: issues, pull requests, releases
    fix: str  # what to do, usually an upgrade
    condition: str = ""  # a key of CONDITIONS, or "" (the versions alone decide)
    probes: tuple[Probe, ...] = ()  # the installed source confirms it (nightlies lie about versions)
    module: str = ""  # set by register()


_REGISTRY: list[Advisory] = []


def register(advisory: Advisory, module: str) -> Advisory:
    """Record ``advisory`` in the catalog; catalog modules call ``register(Advisory(...), __name__)``."""
    advisory = Advisory(**{**advisory.__dict__, "module": module})
    _REGISTRY[:] = [a for a in _REGISTRY if (a.module, a.id) != (module, advisory.id)]
    _REGISTRY.append(advisory)
    return advisory


def registered() -> list[Advisory]:
    return list(_REGISTRY)


def forget(package: str) -> None:
    """Drop what the modules of ``package`` registered (a user catalog about to be re-read)."""
    _REGISTRY[:] = [a for a in _REGISTRY if a.module != package and not a.module.startswith(package + ".")]
