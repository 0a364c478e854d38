"""speculators 0.3.0 computes the teacher logits without the verifier's final norm.

The EAGLE-3 trainer (``speculators/models/eagle3/core.py``, ``Eagle3DraftModel.forward``)
turns the verifier's last hidden states into target logits with
``self.verifier_lm_head(verifier_last_hidden_states)``.  Those states are the residual stream
after the last decoder layer, *before* the model's final RMSNorm (the generator's last capture:
id ``N`` under ``speculators.capture_convention``, ``N - 1`` upstream), while the verifier
computes its logits as ``lm_head(norm(h))``.  Without the norm the distillation targets are
not the verifier's distribution.  speculators 0.4.0 fixed it: it loads ``model.norm.weight``
into a frozen ``verifier_norm`` and uses ``verifier_lm_head(verifier_norm(h))``.  This patch
backports that fix to 0.3.0 (and keeps the frozen norm out of saved checkpoints, like
``verifier_lm_head``).  Independent of vLLM.
"""

from vllm_compat.catalog.patch import InsertAfter, Patch, ReplaceExpr, ReplaceStmt, register

CORE = "speculators/models/eagle3/core.py"

register(Patch(
    id="speculators.teacher_logits_final_norm",
    title="apply the verifier's final norm before its lm_head for teacher logits (0.3.0)",
    target="speculators",
    target_versions=">=0.3.0,<0.4",
    why="0.3.0 feeds pre-norm hidden states straight into the verifier's lm_head, so the "
        "teacher logits are not the verifier's.",
    upstream="speculators 0.4.0 speculators/models/eagle3/core.py: verifier_norm "
             "(model.norm.weight) applied before verifier_lm_head (a speculators bug, not vLLM).",
    remove_when="drop with speculators 0.3.x support.",
    edits=(
        ReplaceStmt(
            CORE, "Eagle3DraftModel",
            old='_keys_to_ignore_on_save: ClassVar[list[str]] = ["verifier_lm_head.weight"]',
            new=(
                "_keys_to_ignore_on_save: ClassVar[list[str]] = [\n"
                '    "verifier_lm_head.weight",\n'
                '    "verifier_norm.weight",\n'
                "]\n"
            ),
        ),
        ReplaceStmt(
            CORE, "Eagle3DraftModel",
            old=(
                "_keys_to_ignore_on_load_missing: ClassVar[list[str]] = [\n"
                '    "embed_tokens.weight",\n'
                '    "verifier_lm_head.weight",\n'
                '    "d2t",\n'
                '    "t2d",\n'
                "]\n"
            ),
            new=(
                "_keys_to_ignore_on_load_missing: ClassVar[list[str]] = [\n"
                '    "embed_tokens.weight",\n'
                '    "verifier_norm.weight",\n'
                '    "verifier_lm_head.weight",\n'
                '    "d2t",\n'
                '    "t2d",\n'
                "]\n"
            ),
        ),
        ReplaceStmt(
            CORE, "Eagle3DraftModel._setup_embeddings_and_lm_heads",
            old=(
                "verifier_weights = load_model_layers(\n"
                '    ["model.embed_tokens.weight", lm_head_key], config.name_or_path\n'
                ")\n"
            ),
            new=(
                "verifier_weights = load_model_layers(\n"
                '    ["model.embed_tokens.weight", lm_head_key, "model.norm.weight"],\n'
                "    config.name_or_path,\n"
                ")\n"
            ),
        ),
        InsertAfter(
            CORE, "Eagle3DraftModel._setup_embeddings_and_lm_heads",
            after="self.verifier_lm_head.weight.requires_grad = False",
            new=(
                "# FINAL NORM of the verifier (teacher logits are lm_head(norm(h)))\n"
                "self.verifier_norm = self._model_definitions.norm_class(\n"
                "    self.hidden_size, eps=verifier_model_config.rms_norm_eps\n"
                ")\n"
                'if "model.norm.weight" in verifier_weights:\n'
                "    self.verifier_norm.load_state_dict(\n"
                '        {"weight": verifier_weights["model.norm.weight"].to(default_dtype)}\n'
                "    )\n"
                "self.verifier_norm.weight.requires_grad = False\n"
            ),
        ),
        ReplaceExpr(
            CORE, "Eagle3DraftModel.forward",
            old="self.verifier_lm_head(verifier_last_hidden_states)",
            new="self.verifier_lm_head(self.verifier_norm(verifier_last_hidden_states))",
        ),
    ),
), __name__)
