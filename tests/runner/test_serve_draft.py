"""vLLM (CPU build) serves a trained checkpoint as the EAGLE-3 draft of the tiny Llama verifier
(``speculative_config={"method": "eagle3", ...}``), and a draft trained on the verifier's own
greedy outputs is accepted more often than an untrained one (same config, 1 step at lr 1e-12).

Data: the verifier's greedy continuations (HF, float32) of chat prompts -> token rows (loss on
the continuation) -> ``extract --backend hf`` with distinct aux layer ids (vLLM collects aux
states by *set* of ids, so the 6-layer default ``2,3,3`` would not serve) -> vocab -> train."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from eagle3_runner.serve_check import acceptance_rate
from eagle3_runner.train import read_losses

pytestmark = pytest.mark.slow

LAYERS = "1,3,4,6"  # aux 1,3,4 + the last layer (6) for the teacher logits
GEN_TOKENS = 40
TRAIN_STEPS = 80


def _prompts(model, n: int, seed: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    from eagle3_runner.tiny import tiny_chat_dataset

    tok = AutoTokenizer.from_pretrained(str(model))
    rows = tiny_chat_dataset(n, seed=seed)
    out = []
    for r in rows:
        msgs = [m for m in r["messages"] if m["role"] != "assistant"][:1]  # system or first user turn
        if msgs[0]["role"] == "system":
            msgs.append(next(m for m in r["messages"] if m["role"] == "user"))
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        out.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))
    return out


def _greedy(model, prompts: list[list[int]], n: int) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).eval()
    pad = m.config.pad_token_id
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # left padding, one batch
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        g = m.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                       pad_token_id=pad)
    return [row[width:].tolist() for row in g]


def test_trained_draft_is_accepted_more_than_untrained(tmp_path, tiny_llama, train_site, run_cli):
    from collections import Counter

    from eagle3_runner.extract import ExtractOptions, extract
    from eagle3_runner.vocab import build_vocab

    t0 = time.monotonic()
    train_prompts = _prompts(tiny_llama, 32, seed=11)
    conts = _greedy(tiny_llama, train_prompts, GEN_TOKENS)
    tokens = tmp_path / "tokens.jsonl"
    tokens.write_text("".join(json.dumps({"input_ids": p + c, "loss_mask": [0] * len(p) + [1] * len(c)}) + "\n"
                              for p, c in zip(train_prompts, conts)))
    counts = Counter(t for c in conts for t in c)
    freq = tmp_path / "tokens.freq.json"
    freq.write_text(json.dumps({"counts": {str(k): v for k, v in counts.items()}, "vocab_size": 512,
                                "counted": "assistant tokens (loss_mask == 1)"}))
    r = extract(ExtractOptions(model=tiny_llama, input=tokens, output=tmp_path / "samples", layers=LAYERS,
                               backend="hf", dtype="float32"))
    assert r.written == len(train_prompts) and not r.bad
    build_vocab(freq, None, 256, tmp_path / "vocab")
    t_data = time.monotonic() - t0

    env = {"PYTHONPATH": str(train_site)}
    common = ["train", "--data", str(tmp_path / "samples"), "--vocab", str(tmp_path / "vocab"),
              "--verifier", str(tiny_llama), "--max-len", "256", "--seed", "0"]
    t1 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:  # the untrained run is mostly start-up: overlap the two
        jobs = [pool.submit(run_cli, *common, "--output", str(tmp_path / "trained"), "--steps", str(TRAIN_STEPS),
                            "--lr", "3e-3", env=env, timeout=900),
                pool.submit(run_cli, *common, "--output", str(tmp_path / "untrained"), "--steps", "1",
                            "--lr", "1e-12", env=env, timeout=900)]
        for job in jobs:
            p = job.result()
            assert p.returncode == 0, p.stderr[-4000:]
    t_train = time.monotonic() - t1
    losses = read_losses(tmp_path / "trained")
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10, losses
    cfg = json.loads((tmp_path / "trained" / "0" / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3" and cfg["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]

    eval_prompts = _prompts(tiny_llama, 8, seed=12345)
    t2 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:  # two engines at once, each pinned to its own core, small KV cache
        jobs = [pool.submit(acceptance_rate, tiny_llama, tmp_path / name / "0", eval_prompts, max_tokens=32,
                            env={"VLLM_CPU_OMP_THREADS_BIND": str(core), "VLLM_CPU_KVCACHE_SPACE": "1"})
                for core, name in enumerate(("trained", "untrained"))]
        trained, untrained = (j.result() for j in jobs)
    t_serve = time.monotonic() - t2
    for name, res in (("trained", trained), ("untrained", untrained)):
        print(f"{name}: acceptance rate {res['acceptance_rate']:.3f} ({res['accepted_tokens']}/{res['draft_tokens']}"
              f" draft tokens, mean acceptance length {res['mean_acceptance_length']:.2f}, per position "
              f"{res['accepted_per_position']}; load {res['load_seconds']:.0f}s, generate {res['generate_seconds']:.1f}s)")
    print(f"timings: data {t_data:.0f}s, training {t_train:.0f}s, serving both {t_serve:.0f}s; "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert trained["draft_tokens"] > 0 and untrained["draft_tokens"] > 0
    # speculative decoding is lossless: both runs produce the verifier's greedy output
    assert trained["outputs"] == untrained["outputs"]
    assert trained["acceptance_rate"] > untrained["acceptance_rate"] + 0.05, (trained, untrained)
