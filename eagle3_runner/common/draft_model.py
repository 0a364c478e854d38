"""The draft as speculators builds and saves it: its classes, the draft layer config, loading a checkpoint.

Shared by ``train`` (which builds and saves drafts) and ``eval`` / ``vocab`` (which load them), so
that neither has to import the other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import BadInput, EnvironmentProblem


def _import_speculators() -> dict[str, Any]:
    try:
        from speculators.config import SpeculatorsConfig, VerifierConfig
        from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
        from speculators.proposals.greedy import GreedyTokenProposalConfig
        from speculators.train import trainer as trainer_mod
        from speculators.train.data import Eagle3SampleFileDataset, create_collate_fn
        from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2
        from speculators.train.noise_transforms import AddUniformNoise
        from speculators.train.utils import apply_fully_sharded
    except Exception as exc:  # noqa: BLE001 - unpatched speculators fails in several ways
        raise EnvironmentProblem(
            f"speculators' training classes are not importable ({type(exc).__name__}: {exc})",
            hint="install speculators into DIR, patch it (python -m vllm_compat apply --site-packages DIR) "
            "and put DIR on PYTHONPATH",
        ) from None
    return locals()


def draft_layer_config(verifier: Path, num_layers: int, attn_implementation: str) -> Any:
    """A Llama decoder-layer config with the verifier's sizes (what speculators' script builds)."""
    from transformers import AutoConfig, LlamaConfig

    vc = AutoConfig.from_pretrained(str(verifier))
    vc = getattr(vc, "text_config", None) or vc
    heads = vc.num_attention_heads
    kv_heads = getattr(vc, "num_key_value_heads", None) or heads
    cfg = LlamaConfig(
        vocab_size=vc.vocab_size,
        hidden_size=vc.hidden_size,
        intermediate_size=vc.intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads if heads % kv_heads == 0 else heads,
        head_dim=vc.hidden_size // heads,
        max_position_embeddings=vc.max_position_embeddings,
        rms_norm_eps=getattr(vc, "rms_norm_eps", 1e-6),
        rope_parameters=getattr(vc, "rope_parameters", None),
        pad_token_id=getattr(vc, "pad_token_id", None),
        bos_token_id=getattr(vc, "bos_token_id", None),
        eos_token_id=getattr(vc, "eos_token_id", None),
    )
    cfg._attn_implementation = attn_implementation
    return cfg


def draft_config(verifier: Path, aux_layer_ids: list[int], draft_vocab_size: int, speculative_tokens: int,
                 num_layers: int = 1, attn_implementation: str = "sdpa") -> Any:
    """The speculators ``Eagle3SpeculatorConfig`` a trained draft is saved with (vLLM reads it as an
    EAGLE-3 draft): the draft layer sized as the verifier, the aux layer ids, the draft vocabulary."""
    from transformers import AutoConfig

    sp = _import_speculators()
    return sp["Eagle3SpeculatorConfig"](
        transformer_layer_config=draft_layer_config(verifier, num_layers, attn_implementation),
        draft_vocab_size=draft_vocab_size,
        norm_before_residual=False,
        eagle_aux_hidden_state_layer_ids=list(aux_layer_ids),
        speculators_config=sp["SpeculatorsConfig"](
            algorithm="eagle3",
            proposal_methods=[sp["GreedyTokenProposalConfig"](speculative_tokens=speculative_tokens)],
            default_proposal_method="greedy",
            verifier=sp["VerifierConfig"].from_config(AutoConfig.from_pretrained(str(verifier)),
                                                      name_or_path=str(Path(verifier).absolute())),
        ),
    )


def zero_centred_verifier_norm(model: Any, verifier: Path) -> float:
    """Give speculators' ``Eagle3DraftModel.verifier_norm`` the verifier's real final-norm scale.

    speculators (0.3.x, 0.4.x) builds ``verifier_norm`` as the draft's Llama RMSNorm (``x * weight``)
    and loads the verifier's ``model.norm.weight`` into it; a zero-centred norm (Qwen3-Next, Gemma:
    ``x * (1 + weight)``) then gives the training targets ``lm_head(norm(h_N))`` of another
    function than the verifier's.  Adds the offset (:func:`.verifier_head.norm_offset`) to the
    weight (not saved: speculators leaves ``verifier_norm`` out of the checkpoint); returns it."""
    import torch

    from .verifier_head import norm_offset

    offset = norm_offset(verifier)
    if offset:
        with torch.no_grad():
            model.verifier_norm.weight.add_(offset)
    return offset


def load_draft(checkpoint: Path, verifier: Path | None = None) -> Any:
    """A saved draft as speculators' ``Eagle3DraftModel`` (config through speculators' config
    class, ``d2t``/``t2d`` from the checkpoint; the verifier's embeddings and lm_head are read
    from the verifier the config names, as speculators' checkpointer does, or from ``verifier``)."""
    from safetensors.torch import load_file

    sp = _import_speculators()
    config = sp["Eagle3SpeculatorConfig"].from_pretrained(str(checkpoint))
    if verifier is not None:
        config.speculators_config.verifier.name_or_path = str(Path(verifier).absolute())
    state = load_file(str(Path(checkpoint) / "model.safetensors"))
    if "d2t" not in state or "t2d" not in state:
        raise BadInput(f"{checkpoint} has no d2t/t2d")
    model = sp["Eagle3DraftModel"](config=config, t2d=state["t2d"].bool(), d2t=state["d2t"].long())
    floats = {k: v.to(model.fc.weight.dtype) if v.is_floating_point() else v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(floats, strict=False)
    # the verifier's parts (embeddings, teacher head, ...) are not saved: speculators' own lists
    not_saved = set(getattr(model, "_keys_to_ignore_on_save", None) or ()) | set(
        getattr(model, "_keys_to_ignore_on_load_missing", None) or ())
    if unexpected or set(missing) - not_saved:
        raise BadInput(f"{checkpoint}: unexpected keys {unexpected}, missing {sorted(set(missing) - not_saved)}")
    zero_centred_verifier_norm(model, Path(config.speculators_config.verifier.name_or_path))
    return model


EMBED_KEY = "embed_tokens.weight"


def drop_shared_embedding(checkpoint: Path, verifier: Path) -> int:
    """Rewrite ``checkpoint/model.safetensors`` without the draft's embedding when it is the
    verifier's own (speculators freezes and saves a copy); the bytes saved, 0 if it was kept.

    Both readers take the verifier's instead: vLLM shares the target's embedding with an EAGLE
    draft whose checkpoint has none (``_maybe_share_embeddings``), and speculators' draft loads
    it from the verifier at construction (``embed_tokens.weight`` is in its ignore-on-load list).
    For SmolLM2-135M the copy is 49,152 x 576 values; for an 8B Llama, 128,256 x 4,096."""
    from safetensors import safe_open
    from safetensors.torch import save

    _import_speculators()  # one clear error when it is missing or unpatched
    from speculators.utils.loading import load_model_layers

    path = Path(checkpoint) / "model.safetensors"
    with safe_open(str(path), framework="pt") as f:
        if EMBED_KEY not in f.keys():
            return 0
        metadata = f.metadata()
        state = {k: f.get_tensor(k) for k in f.keys()}
    ours = state[EMBED_KEY]
    theirs = load_model_layers(["model.embed_tokens.weight"], str(verifier))["model.embed_tokens.weight"]
    if theirs.shape != ours.shape or not bool((theirs.to(ours.dtype) == ours).all()):
        return 0  # trained or from another verifier: the draft's own, kept
    saved = ours.numel() * ours.element_size()
    del state[EMBED_KEY]
    from .atomic import write_bytes

    write_bytes(path, save(state, metadata=metadata))
    return saved

