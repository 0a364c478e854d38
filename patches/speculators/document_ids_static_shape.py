"""speculators builds the packed batch's document ids with a data-dependent shape.

``create_combined_mask_mod`` (``speculators/models/eagle3/attention.py``, called at the top of
the ``@torch.compile``'d ``Eagle3DraftModel.forward``) expands ``lengths`` into one document id
per position with ``torch.repeat_interleave(arange, lengths)`` and pads to the batch length with
``-1``.  ``repeat_interleave``'s output shape depends on the lengths' values, so TorchDynamo stops
the graph there ("Dynamic shape operator ... aten.repeat_interleave.Tensor") and the device is
synced to read the lengths back.  The same ids come from a static shape: position ``p`` belongs
to the document whose end (``cumsum(lengths)``) is the first one past ``p``
(``searchsorted(ends, p, right=True)``, which also skips empty documents as repeat_interleave
does), and positions at or past the last end are ``-1``.
"""

from vllm_compat.catalog.patch import Patch, ReplaceStmt, register

ATTENTION = "speculators/models/eagle3/attention.py"

register(Patch(
    id="speculators.document_ids_static_shape",
    title="document ids of a packed batch with a static shape (no graph break in the compiled forward)",
    target="speculators",
    target_versions=">=0.3.0,<0.5",
    why="repeat_interleave with tensor repeats has a data-dependent output shape: torch.compile "
        "breaks the training forward before the attention mask and syncs the device there.",
    upstream="speculators 0.3.0 and 0.4.0 speculators/models/eagle3/attention.py "
             "create_combined_mask_mod (repeat_interleave + cat of -1 padding); not changed upstream.",
    remove_when="speculators builds document ids without repeat_interleave.",
    edits=(
        ReplaceStmt(
            ATTENTION, "create_combined_mask_mod",
            old=(
                "document_ids = torch.repeat_interleave(\n"
                "    torch.arange(lengths.shape[0], device=lengths.device, dtype=torch.long), lengths\n"
                ")\n"
                "document_ids = torch.cat(\n"
                "    [\n"
                "        document_ids,\n"
                "        -1\n"
                "        * torch.ones(\n"
                "            total_seq_len - document_ids.shape[0],\n"
                "            device=lengths.device,\n"
                "            dtype=torch.long,\n"
                "        ),\n"
                "    ]\n"
                ").contiguous()\n"
            ),
            new=(
                "positions = torch.arange(total_seq_len, device=lengths.device, dtype=torch.long)\n"
                "ends = torch.cumsum(lengths, dim=0)\n"
                "# the document whose end is the first past each position; -1 past the last end\n"
                "document_ids = torch.where(\n"
                "    positions < ends[-1], torch.searchsorted(ends, positions, right=True), -1\n"
                ").contiguous()\n"
            ),
        ),
    ),
), __name__)
