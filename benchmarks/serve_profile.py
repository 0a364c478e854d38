"""Where a speculative decoding step's time goes, at the shapes users serve: vLLM with and without an
EAGLE-3 draft (and with ngram, the spec-decode path without a draft model), timed and profiled.

    # here, where speculators is importable: the model folders (configs only, a few KiB)
    python3 benchmarks/serve_profile.py --write-models MODELS [--shapes smollm2,llama31_8b,qwen3_8b]
    # on the GPU machine
    python3 benchmarks/serve_profile.py --models MODELS --out OUT [--shapes ...] [--modes alone,eagle3,ngram_gpu]
        [--batches 1,8] [-k 3] [--tokens 128] [--prompt-len 160] [--prompts 16] [--repeats 3]
        [--profile-tokens 24] [--budget-s 540] [--set KEY=JSON ...]

Shapes decide the cost, not the weights: every engine loads ``load_format="dummy"`` (random
weights), so a verifier and a draft of the right shape time and profile as trained ones do.  The
verifier folders hold the real models' configs; each draft's config is the one ``eagle3 train``
writes for that verifier (``eagle3_runner.common.draft_model.draft_config``).  vLLM marks an
EAGLE draft as having its own ``lm_head`` only while it loads weights, so with dummy weights it
would silently share the verifier's full-vocabulary head: the child sets ``has_own_lm_head``
(``--own-lm-head``, on by default) and checks vLLM's log says "distinct lm_head".

Timing is ``eagle3 serve-check --speed``'s own code (``eagle3_runner.evaluate.speed``) with
``ignore_eos`` (random weights never stop).  A profile of ``--profile-tokens`` steps at each batch
size follows on the warm engine (vLLM's torch profiler), summarised by ``trace_summary.py``.
Each (shape, mode) is one engine in a child process; results are written after each one to
``OUT/serve_profile.json``, and the run stops starting engines when ``--budget-s`` runs short.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# The verifiers' shapes (their config.json as published) and the draft each gets.
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2": {"config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
                           "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                           "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152, "tie_word_embeddings": True,
                           "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
                           "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"},
                "aux": [2, 15, 27], "draft_vocab": 12288},
    "llama31_8b": {"config": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                              "tie_word_embeddings": False, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                              "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                               "original_max_position_embeddings": 8192, "rope_type": "llama3"},
                              "rms_norm_eps": 1e-5, "hidden_act": "silu", "bos_token_id": 128000,
                              "eos_token_id": 128009, "torch_dtype": "bfloat16"},
                   "aux": [2, 16, 29], "draft_vocab": 32000},
    "qwen3_8b": {"config": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
                            "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                            "tie_word_embeddings": False, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
                            "rms_norm_eps": 1e-6, "hidden_act": "silu", "bos_token_id": 151643,
                            "eos_token_id": 151645, "torch_dtype": "bfloat16"},
                 "aux": [2, 18, 33], "draft_vocab": 32000},
}
OWN_HEAD_LOG = "distinct lm_head"
SHARED_HEAD_LOG = "Sharing target model lm_head"


def write_models(root: Path, shapes: list[str], k: int) -> None:
    """Each shape's verifier folder (config.json) and draft folder (the config ``eagle3 train`` writes)."""
    from eagle3_runner.common.draft_model import draft_config

    for name in shapes:
        spec = SHAPES[name]
        v, d = root / name / "verifier", root / name / "draft"
        v.mkdir(parents=True, exist_ok=True)
        (v / "config.json").write_text(json.dumps(spec["config"], indent=1))
        cfg = draft_config(v, spec["aux"], spec["draft_vocab"], k)
        cfg.save_pretrained(str(d))
        print(f"{name}: {v} and {d}")


def speculative(mode: str, draft: Path, k: int) -> dict[str, Any] | None:
    if mode == "alone":
        return None
    if mode.startswith("eagle3"):
        return {"method": "eagle3", "model": str(draft), "num_speculative_tokens": int(mode[7:] or k)}
    if mode in ("ngram", "ngram_gpu"):
        return {"method": mode, "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    raise SystemExit(f"unknown mode {mode} (alone, eagle3, eagle3-K, ngram, ngram_gpu)")


def _prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rnd = random.Random(seed)
    return [[rnd.randrange(1000, min(vocab, 30000)) for _ in range(length)] for _ in range(n)]


PLUGIN = '''"""serve_profile's vLLM plugin: EAGLE-3 drafts keep their own (draft-vocabulary) lm_head with
dummy weights, as after loading a trained checkpoint (vLLM sets has_own_lm_head only in load_weights)."""


def register():
    import functools

    from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM

    if getattr(Eagle3LlamaForCausalLM, "_serve_profile_own_head", False):
        return
    init = Eagle3LlamaForCausalLM.__init__

    @functools.wraps(init)  # vLLM reads the signature to choose the constructor's arguments
    def patched(self, *a, **kw):
        init(self, *a, **kw)
        self.has_own_lm_head = True

    Eagle3LlamaForCausalLM.__init__ = patched
    Eagle3LlamaForCausalLM._serve_profile_own_head = True
'''


def own_lm_head_site(root: Path) -> Path:
    """A folder for PYTHONPATH holding :data:`PLUGIN` as a vLLM general plugin (an entry point),
    which vLLM loads in every process it starts, forked or spawned."""
    site = root / "plugin-site"
    info = site / "serve_profile_plugin-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (site / "serve_profile_plugin.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: serve-profile-plugin\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[vllm.general_plugins]\nserve_profile = serve_profile_plugin:register\n")
    return site


def _profile_after(bench: dict[str, Any]):  # noqa: ANN202
    def after(llm, req) -> dict[str, Any]:  # noqa: ANN001
        from trace_summary import load, newest_trace, summarize
        from vllm import SamplingParams

        from eagle3_runner.evaluate.speed import drive

        out: dict[str, Any] = {}
        params = SamplingParams(temperature=0.0, max_tokens=bench["profile_tokens"], ignore_eos=True,
                                detokenize=False)
        folder = Path(bench["profile_dir"])
        for b in req.batches:
            llm.start_profile()
            drive(llm.llm_engine, req.prompts[:b], params, b, f"prof{b}")
            llm.stop_profile()
            trace = newest_trace(folder)
            out[str(b)] = summarize(load(trace)) if trace else {"note": "no trace written"}
            if trace and bench.get("keep_trace_dir"):
                keep = Path(bench["keep_trace_dir"]) / f"{bench['tag']}-b{b}.json.gz"
                if trace.stat().st_size < 12 << 20:
                    keep.parent.mkdir(parents=True, exist_ok=True)
                    trace.replace(keep)
        return out
    return after


def child(request: Path, result: Path) -> int:
    from eagle3_runner.evaluate.speed import SpeedRequest, run_engine

    raw = json.loads(request.read_text())
    bench = raw.pop("bench")
    after = _profile_after(bench) if bench.get("profile_tokens") else None
    result.write_text(json.dumps(run_engine(SpeedRequest(**raw), after)))
    return 0


def one(models: Path, out: Path, shape: str, mode: str, a: argparse.Namespace, logs: Path) -> dict[str, Any]:
    from eagle3_runner.evaluate.speed import SpeedRequest, in_child

    v, d = models / shape / "verifier", models / shape / "draft"
    spec = speculative(mode, d, a.k)
    prompts = _prompts(a.prompts, a.prompt_len, SHAPES[shape]["config"]["vocab_size"])
    tag = f"{shape}-{mode}"
    prof = out / "prof" / tag
    extra = {"load_format": "dummy", "skip_tokenizer_init": True,
             **({"profiler_config": {"profiler": "torch", "torch_profiler_dir": str(prof),
                                     "torch_profiler_with_stack": False, "torch_profiler_record_shapes": False,
                                     "torch_profiler_dump_cuda_time_total": False}} if a.profile_tokens else {}),
             **{k: json.loads(v) for k, v in (s.split("=", 1) for s in a.set)}}
    req = SpeedRequest(str(v), spec, prompts, a.tokens, [int(b) for b in a.batches.split(",")], a.repeats,
                       max(1024, a.prompt_len + a.tokens + 64), "bfloat16", a.eager, True, extra)
    bench = {"own_lm_head": a.own_lm_head and bool(spec and spec["method"] == "eagle3"),
             "profile_tokens": a.profile_tokens, "profile_dir": str(prof), "tag": tag,
             "keep_trace_dir": str(out / "traces") if a.keep_traces else None}
    env = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1", "PYTHONUNBUFFERED": "1"}
    if bench["own_lm_head"]:
        env["PYTHONPATH"] = os.pathsep.join([str(own_lm_head_site(out)), os.environ.get("PYTHONPATH", "")])
    t = time.monotonic()
    log = logs / f"{tag}.log"
    try:
        res = in_child(req, a.timeout, env, entry=(__file__, "--child"), extra={"bench": bench}, log=log)
    except Exception as exc:  # noqa: BLE001 - one failed engine must not lose the others' results
        return {"error": str(exc)[-4000:], "wall_s": time.monotonic() - t}
    text = log.read_text(errors="replace") if log.is_file() else ""
    res["lm_head"] = ("own" if OWN_HEAD_LOG in text else "shared (full vocabulary)" if SHARED_HEAD_LOG in text
                      else None)
    res["wall_s"] = time.monotonic() - t
    for runs in res["batches"].values():
        for r in runs:
            r.pop("outputs", None)
    return res


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        ap = argparse.ArgumentParser()
        ap.add_argument("--child", action="store_true")
        ap.add_argument("--request", type=Path, required=True)
        ap.add_argument("--result", type=Path, required=True)
        c = ap.parse_args()
        return child(c.request, c.result)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-models", type=Path)
    ap.add_argument("--models", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--shapes", default="smollm2,llama31_8b,qwen3_8b")
    ap.add_argument("--modes", default="alone,eagle3,ngram_gpu")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-len", type=int, default=160)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile-tokens", type=int, default=24, help="0: no profile")
    ap.add_argument("--keep-traces", action="store_true", help="keep traces under OUT/traces (each < 12 MiB)")
    ap.add_argument("--eager", action="store_true", default=None)
    ap.add_argument("--own-lm-head", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--set", action="append", default=[], help="extra vLLM engine argument KEY=JSON")
    ap.add_argument("--budget-s", type=float, default=540)
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--tag", default="", help="a label for this run's results (e.g. the vLLM version)")
    a = ap.parse_args()
    shapes = a.shapes.split(",")
    if a.write_models:
        write_models(a.write_models, shapes, a.k)
        return 0
    if not (a.models and a.out):
        ap.error("--models and --out (or --write-models)")
    a.out.mkdir(parents=True, exist_ok=True)
    logs = a.out / "logs"
    logs.mkdir(exist_ok=True)
    start = time.monotonic()
    path = a.out / "serve_profile.json"
    results: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    from eagle3_runner.common.environment import versions

    meta = {"versions": versions(), "args": {k: str(v) for k, v in vars(a).items()}}
    for shape in shapes:
        for mode in a.modes.split(","):
            left = a.budget_s - (time.monotonic() - start)
            if left < 75:
                print(f"{shape} {mode}: skipped, {left:.0f} s of the budget left", flush=True)
                continue
            key = f"{a.tag}{shape}/{mode}"
            r = one(a.models, a.out, shape, mode, a, logs)
            results[key] = {**r, "meta": meta}
            path.write_text(json.dumps(results, indent=1))
            print(line(key, r), flush=True)
    return 0


def line(key: str, r: dict[str, Any]) -> str:
    if "error" in r:
        return f"{key}: FAILED ({r['error'][-300:]})"
    parts = []
    for b, runs in r["batches"].items():
        ms = sorted(x["ms_per_step"] for x in runs if x["ms_per_step"])
        tps = sorted(x["tokens_per_s"] for x in runs)
        drafts = sum(x["drafts"] for x in runs)
        al = 1 + sum(x["accepted_tokens"] for x in runs) / drafts if drafts else None
        parts.append(f"b{b}: {tps[len(tps) // 2]:,.0f} tok/s, {ms[len(ms) // 2] if ms else float('nan'):.2f} ms/step"
                     + (f", AL {al:.2f}" if al else ""))
    prof = r.get("after") or {}
    for b, p in prof.items():
        ph = p.get("phases", {})
        fwd, dr = ph.get("gpu_model_runner: forward", {}), ph.get("gpu_model_runner: draft", {})
        parts.append(f"prof b{b}: step {p.get('ms_per_step_profiled') or 0:.2f} ms, gpu busy "
                     f"{100 * (p.get('gpu', {}).get('busy_share') or 0):.0f}%, fwd host {fwd.get('host_ms', 0):.2f}/gpu "
                     f"{fwd.get('gpu_ms', 0):.2f}, draft host {dr.get('host_ms', 0):.2f}/gpu {dr.get('gpu_ms', 0):.2f} "
                     f"(graphs {dr.get('graph_launches', 0)}, kernels {dr.get('kernel_launches', 0)})")
    return f"{key} [load {r.get('load_s', 0):.0f} s, lm_head {r.get('lm_head')}]: " + "; ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
