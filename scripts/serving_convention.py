#!/usr/bin/env python3
"""What vLLM's EAGLE-3 serving path feeds the draft, read from each release's source.

For every vLLM release of the static matrix (sources from the wheels ``tests/upstream.py``
caches), three facts that training must match:

* ``aux``: which residual stream the verifier records for aux layer id ``i``
  (``LlamaModel.forward``): ``entering`` = ``hidden_states + residual`` entering decoder layer
  ``i`` (0.11: recorded before layer ``idx`` under ``idx``; later: after layer ``idx`` under
  ``idx + 1``, through ``_maybe_add_hidden_state``), the convention ``eagle3 extract`` writes;
* ``shift``: the proposer feeds token ``x(t+1)`` with the state of ``t``, as speculators'
  ``shift_batch``: in the V1 proposer (``input_ids[:num_tokens - 1] = target_token_ids[1:]``,
  ``v1/spec_decode/``, gone in 0.34.0) and in Model Runner V2's (the Triton kernel of
  ``v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py``, 0.33.0 on, storing
  ``target_input_ids[start + i]`` at ``draft_input_ids[start + i - 1]``); every path a release
  has must shift;
* ``norm_before_residual``: the default vLLM assumes when a speculators checkpoint omits the
  field (speculators' own default is ``False``; ``eagle3 train`` always writes it).

    python scripts/serving_convention.py            # a Markdown table, exit 1 if a release differs
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIFT = re.compile(r"input_ids\[\s*:\s*num_tokens\s*-\s*1\s*\]\s*=\s*target_token_ids\[\s*1\s*:\s*\]")
SHIFT_MRV2 = re.compile(
    r"for\s+i\s+in\s+range\(\s*1\s*,\s*query_len[^)]*\):"  # from the second token of the query on
    r"(?:(?!\n\s*for\s).)*?(\w+)\s*=\s*tl\.load\(\s*target_input_ids_ptr\s*\+\s*query_start\s*\+\s*block\b"
    r"(?:(?!\n\s*for\s).)*?tl\.store\(\s*draft_input_ids_ptr\s*\+\s*query_start\s*\+\s*block\s*-\s*1\s*,\s*\1\b",
    re.S)
MRV2_PROPOSER = ("v1", "worker", "gpu", "spec_decode", "target_dependent_ar", "speculator.py")
EXPECTED = {"aux": "entering", "shift": True}


def _calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def _is_layer_call(stmt: ast.stmt) -> bool:
    return any(isinstance(c.func, ast.Name) and c.func.id == "layer" for c in _calls(stmt))


def _adds_stream(node: ast.AST) -> bool:
    """Whether ``node`` appends ``hidden_states + residual`` (the residual stream)."""
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            names = {getattr(n.left, "id", None), getattr(n.right, "id", None)}
            if names == {"hidden_states", "residual"}:
                return True
    return False


def aux_convention(llama_src: str, helper_src: str = "") -> str:
    """``entering``, ``output`` (the stream leaving layer ``i``) or ``unknown``."""
    tree = ast.parse(llama_src)
    helper_adds_stream = False
    for mod in (tree, ast.parse(helper_src or "pass")):
        for fn in ast.walk(mod):
            if isinstance(fn, ast.FunctionDef) and fn.name == "_maybe_add_hidden_state":
                helper_adds_stream = _adds_stream(fn)
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name == "LlamaModel"):
            continue
        forward = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
        for loop in ast.walk(forward):
            if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Tuple)):
                continue
            idx = loop.target.elts[0].id  # for idx, layer in enumerate(...)
            at = next((i for i, s in enumerate(loop.body) if _is_layer_call(s)), None)
            if at is None:
                continue
            for i, stmt in enumerate(loop.body):
                if isinstance(stmt, ast.If) and "aux_hidden_state_layers" in ast.unparse(stmt.test) \
                        and _adds_stream(stmt):
                    return "entering" if i < at else "output"
                for c in _calls(stmt):
                    if getattr(c.func, "attr", None) == "_maybe_add_hidden_state" and helper_adds_stream:
                        layer_id = ast.unparse(c.args[1])
                        after = i > at
                        if layer_id == f"{idx} + 1" and after or layer_id == idx and not after:
                            return "entering"
                        return "output"
    return "unknown"


def norm_before_residual_default(algos_src: str) -> str:
    """The default in ``update_eagle3``'s ``config_dict.get("norm_before_residual", ...)``."""
    for fn in ast.walk(ast.parse(algos_src)):
        if isinstance(fn, ast.FunctionDef) and fn.name == "update_eagle3":
            for c in _calls(fn):
                if getattr(c.func, "attr", None) == "get" and c.args and \
                        isinstance(c.args[0], ast.Constant) and c.args[0].value == "norm_before_residual":
                    return ast.unparse(c.args[1]) if len(c.args) > 1 else "None"
    return "not read"


def release_facts(tree: Path) -> dict:
    models = tree / "vllm" / "model_executor" / "models"
    spec = tree / "vllm" / "v1" / "spec_decode"
    v1 = "".join(p.read_text() for p in spec.glob("*.py") if p.name in ("eagle.py", "llm_base_proposer.py"))
    mrv2 = tree.joinpath("vllm", *MRV2_PROPOSER)
    paths = ([bool(SHIFT.search(v1))] if v1 else []) + ([bool(SHIFT_MRV2.search(mrv2.read_text()))] if mrv2.is_file() else [])
    algos = tree / "vllm" / "transformers_utils" / "configs" / "speculators" / "algos.py"
    return {
        "aux": aux_convention((models / "llama.py").read_text(), (models / "interfaces.py").read_text()),
        "shift": bool(paths) and all(paths),
        "norm_before_residual": norm_before_residual_default(algos.read_text()) if algos.is_file() else "not read",
    }


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "scripts"))
    import upstream
    from static_matrix import VLLM

    rows, bad = [], []
    for v in VLLM:
        facts = release_facts(upstream.source_tree(upstream.vllm_wheel(v)))
        rows.append(f"| {v} | {facts['aux']} | {'yes' if facts['shift'] else 'NO'} | {facts['norm_before_residual']} |")
        if any(facts[k] != want for k, want in EXPECTED.items()):
            bad.append(v)
    print("| vLLM | aux id i records | x(t+1) with g(t) | norm_before_residual if absent |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    if bad:
        print(f"releases that differ from what eagle3 trains: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
