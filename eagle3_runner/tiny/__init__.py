"""Tiny random-weight models and chat data, built offline and deterministically.

Used by the test suite and by ``eagle3 run --tiny``: there is no model hub on the
machines this project is tested on, so every model is built here from a config,
random weights (seeded) and a BPE tokenizer trained in-process on a small
built-in English corpus.

``python -m eagle3_runner.tiny DEST --arch llama|deepseek_v2`` builds one from
the command line.
"""

from __future__ import annotations

import argparse
import logging
import random
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

VOCAB_SIZE = 512
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
END = "<|end|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, *ROLE_TOKENS, END]

# Assistant turns (their content and the closing <|end|>) sit inside
# {% generation %} so that ``return_assistant_tokens_mask=True`` works.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>\n"
    "{% generation %}{{ message['content'] }}<|end|>{% endgeneration %}\n"
    "{% else %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_PARAGRAPHS = (
    "The river ran past the old mill, and the children watched the water turn the wheel. "
    "In the morning the baker opened the shop and the smell of bread filled the street.",
    "A good question is often more useful than a quick answer. "
    "When you explain an idea, start with what the listener already knows.",
    "The train to the city leaves at seven in the morning and arrives before noon. "
    "Please bring a coat, because the weather in the hills can change quickly.",
    "Water boils at one hundred degrees at sea level, but at a lower temperature on a high mountain. "
    "Plants need light, water and air to grow, and most of them need soil as well.",
    "The library is open every day except Sunday. You can borrow three books at a time "
    "and keep them for two weeks. Return them to the desk near the door.",
    "To make a cup of tea, boil the water, warm the pot, add the leaves and wait a few minutes. "
    "Some people add milk, others prefer lemon or honey.",
    "Numbers can be added, subtracted, multiplied and divided. Two plus two is four, "
    "and ten divided by five is two. A prime number has exactly two divisors.",
    "The cat slept in the sun while the dog ran around the garden. "
    "Birds sang in the trees and the wind moved the tall grass.",
    "Thank you for your message. I will look into the problem and write back tomorrow. "
    "If you have more details, please send them to me.",
    "Computers store information as numbers. A program is a list of steps that the computer follows, "
    "and a good program is clear, short and tested.",
)

_SUBJECTS = ("the teacher", "my friend", "a small bird", "the old man", "our team", "the river",
             "the city", "a young girl", "the farmer", "the doctor", "this book", "the weather")
_VERBS = ("likes", "needs", "finds", "makes", "sees", "helps", "brings", "opens", "reads",
          "writes", "follows", "explains")
_OBJECTS = ("the door", "a warm meal", "the answer", "some water", "a new plan", "the letter",
            "the garden", "a simple idea", "the map", "a short story", "the window", "the road")
_TAILS = ("every day", "in the morning", "after school", "before the rain", "with great care",
          "near the house", "at night", "without a word", "once again", "for the first time")
_TOPICS = ("tea", "trains", "rivers", "books", "numbers", "gardens", "the weather", "bread",
           "computers", "mountains", "birds", "letters")
_QUESTIONS = ("Can you tell me about {t}?", "What do you know about {t}?",
              "Please explain {t} in a few words.", "Why do people like {t}?",
              "Write a short note about {t}.", "How would you describe {t} to a child?")
_SYSTEMS = ("You are a helpful assistant.", "You answer briefly and clearly.",
            "You are a friendly teacher.")


def _sentence(rng: random.Random) -> str:
    s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_TAILS)}."
    return s[0].upper() + s[1:]


def corpus() -> Iterator[str]:
    """The built-in training corpus of the tiny tokenizer (fixed, not seeded)."""
    rng = random.Random(1234)
    yield from _PARAGRAPHS
    for _ in range(400):
        yield " ".join(_sentence(rng) for _ in range(3))
    for topic in _TOPICS:
        for q in _QUESTIONS:
            yield q.format(t=topic)
    yield from _SYSTEMS


def build_tokenizer(dest: Path, markers: tuple[str, ...] = (*ROLE_TOKENS, END), eos: str = EOS,
                    chat_template: str = CHAT_TEMPLATE) -> Path:
    """Train a byte-level BPE tokenizer of ``VOCAB_SIZE`` tokens and save it to ``dest``.

    ``markers`` are the chat template's special tokens (one token each), ``eos`` the end token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(dict.fromkeys([BOS, EOS, PAD, eos, *markers])),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus()), trainer=trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"tiny tokenizer has {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=eos,
        pad_token=PAD,
        additional_special_tokens=[m for m in dict.fromkeys([EOS, *markers]) if m != eos],
        model_max_length=2048,
    )
    fast.chat_template = chat_template
    dest.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(dest))
    return dest


def _special_ids(dest: Path) -> dict[str, int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(dest))
    return {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }


def _save(model_cls, config, dest: Path, seed: int, dtype) -> Path:  # noqa: ANN001
    import torch

    torch.manual_seed(seed)
    model = model_cls(config)
    model = model.to(dtype)
    model.eval()
    model.save_pretrained(str(dest))
    n_params = sum(p.numel() for p in model.parameters())
    logger.info("built %s (%d parameters, %s) in %s", type(model).__name__, n_params, dtype, dest)
    return dest


def build_tiny_llama(dest: Path, seed: int = 0) -> Path:
    """A 6-layer Llama (hidden 256, vocab 512) with float32 random weights and the tiny tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    dest = Path(dest)
    build_tokenizer(dest)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        dtype="float32",
        **_special_ids(dest),
    )
    return _save(LlamaForCausalLM, config, dest, seed, torch.float32)


def build_tiny_deepseek_v2(dest: Path, seed: int = 0) -> Path:
    """A 4-layer DeepseekV2 (MLA + MoE) in bfloat16 with the tiny tokenizer.

    ``kv_lora_rank + qk_rope_head_dim = 576``: the CPU MLA kernel supports only that latent size.
    """
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    dest = Path(dest)
    build_tokenizer(dest)
    config = DeepseekV2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        kv_lora_rank=512,
        q_lora_rank=64,
        qk_rope_head_dim=64,
        qk_nope_head_dim=32,
        v_head_dim=32,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
        topk_method="greedy",
        # vLLM always routes through grouped top-k; one group is plain top-k, as HF's "greedy".
        n_group=1,
        topk_group=1,
        tie_word_embeddings=False,
        dtype="bfloat16",
        **_special_ids(dest),
    )
    return _save(DeepseekV2ForCausalLM, config, dest, seed, torch.bfloat16)


BUILDERS = {"llama": build_tiny_llama, "deepseek_v2": build_tiny_deepseek_v2}


def tiny_chat_dataset(n: int, seed: int, sentences: tuple[int, int] = (1, 4)) -> list[dict]:
    """``n`` chat rows ``{"messages": [{"role", "content"}, ...]}``, deterministic from ``seed``.

    Rows have an optional system turn and one to three user/assistant exchanges; each answer has
    between ``sentences[0]`` and ``sentences[1]`` sentences.
    """
    rng = random.Random(seed)
    rows: list[dict] = []
    for _ in range(n):
        messages: list[dict[str, str]] = []
        if rng.random() < 0.3:
            messages.append({"role": "system", "content": rng.choice(_SYSTEMS)})
        for _ in range(rng.randint(1, 3)):
            topic = rng.choice(_TOPICS)
            messages.append({"role": "user", "content": rng.choice(_QUESTIONS).format(t=topic)})
            answer = " ".join(_sentence(rng) for _ in range(rng.randint(*sentences)))
            messages.append({"role": "assistant", "content": answer})
        rows.append({"messages": messages})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eagle3_runner.tiny", description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--arch", choices=sorted(BUILDERS), default="llama")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    path = BUILDERS[args.arch](args.dest, seed=args.seed)
    print(path)
    return 0

