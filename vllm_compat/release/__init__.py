"""Release day: ``check --against`` (:mod:`.against`, with the release wheels of :mod:`.wheels`)
before an upgrade, ``prove`` (:mod:`.prove`, its workers :mod:`.prove_worker` and
:mod:`.serve_worker`) after it, and their CLI (:mod:`.cli`).

The engine never imports this room (the proof file it reads is :mod:`vllm_compat.proof`).
"""
