"""speculators' EAGLE-3 accuracy metric breaks the compiled training forward into pieces.

``compute_accuracy`` (``speculators/models/eagle3/core.py``, called once per TTT step inside
the ``@torch.compile``'d ``Eagle3DraftModel.forward``) counts the correct predictions inside the
loss mask with ``torch.masked_select``, whose output shape depends on the mask's values:
TorchDynamo stops the graph there ("Dynamic shape operator ... aten.masked_select"), so every
TTT step splits the forward (and its backward) into separately compiled graphs with a
device-to-host sync between them.  The same two numbers come from a masked ``logical_and``:
the correct-and-in-mask count and the mask's size (sums of 0/1 values, exact), without a
data-dependent shape.  Metrics only: the loss and the gradients are untouched.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

CORE = "speculators/models/eagle3/core.py"

register(Patch(
    id="speculators.accuracy_without_masked_select",
    title="count the masked accuracy without masked_select (no graph break in the compiled forward)",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    why="masked_select has a data-dependent output shape: torch.compile breaks the training "
        "forward at every TTT step and syncs the device there.",
    upstream="speculators 0.3.0 and 0.4.0 speculators/models/eagle3/core.py compute_accuracy "
             "(torch.masked_select(correct, loss_mask)); not changed upstream.",
    remove_when="speculators computes the masked accuracy without masked_select.",
    edits=(
        ReplaceStmt(
            CORE, "compute_accuracy",
            old=(
                "if loss_mask is not None:\n"
                "    correct = torch.masked_select(correct, loss_mask.to(torch.bool))\n"
            ),
            new=(
                "in_loss = loss_mask.to(torch.bool) if loss_mask is not None else None\n"
                "if in_loss is not None:\n"
                "    # masked, not selected: the same counts without a data-dependent shape\n"
                "    correct = torch.logical_and(correct, in_loss)\n"
            ),
        ),
        ReplaceStmt(
            CORE, "compute_accuracy",
            old="full_denom = correct.numel()",
            new="full_denom = in_loss.sum() if in_loss is not None else correct.numel()",
        ),
    ),
), __name__)
