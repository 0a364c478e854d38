"""The two graph-break patches compute what speculators' own code computes.

``speculators.document_ids_static_shape`` and ``speculators.accuracy_without_masked_select``
replace data-dependent-shape ops inside the compiled training forward.  Here the upstream
function (from the real speculators 0.3.0 wheel) and the patched one (from the patched site
training uses) are taken out of their files as they are and run side by side on the same
inputs: the attention masks must be equal entry for entry, the accuracies bit for bit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

ATTENTION = "speculators/models/eagle3/attention.py"
CORE = "speculators/models/eagle3/core.py"


def _function(path: Path, name: str):  # noqa: ANN202
    """The top-level function ``name`` of ``path``, executed alone (torch and flex masks in scope)."""
    from torch.nn.attention import flex_attention as fa

    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    scope = {"torch": torch, "and_masks": fa.and_masks, "or_masks": fa.or_masks}
    exec(compile(ast.Module([node], []), str(path), "exec"), scope)  # noqa: S102 - the file's own code
    return scope[name]


@pytest.fixture(scope="module")
def sources(train_site) -> tuple[Path, Path]:
    import upstream

    return upstream.source_tree(upstream.wheel("speculators", "0.3.0")), Path(train_site)


def test_patched_sources_are_the_patched_ones(sources):
    up, patched = sources
    assert "repeat_interleave" in (up / ATTENTION).read_text() and "masked_select" in (up / CORE).read_text()
    assert "searchsorted" in (patched / ATTENTION).read_text() and "masked_select" not in (patched / CORE).read_text()


@pytest.mark.parametrize("lengths,total", [([5], 8), ([3, 4, 1], 8), ([2, 0, 3], 7), ([4, 4], 8), ([1] * 6, 9),
                                           ([7, 9, 2, 13], 40)])
def test_document_mask_equals_upstream(sources, lengths, total):
    from torch.nn.attention.flex_attention import create_mask

    up, patched = sources
    masks = []
    for root in (up, patched):
        mod = _function(root / ATTENTION, "create_combined_mask_mod")(torch.tensor(lengths), total)
        # queries against the keys of three TTT steps (the draft keys are offset by total)
        masks.append(create_mask(mod, None, None, total, 3 * total, device="cpu"))
    assert torch.equal(masks[0], masks[1])
    assert masks[1].sum() > 0


def test_accuracy_equals_upstream(sources):
    up, patched = sources
    funcs = [_function(root / CORE, "compute_accuracy") for root in (up, patched)]
    g = torch.Generator().manual_seed(0)
    for trial in range(20):
        n, v = 37, 11
        logits, targets = torch.randn(1, n, v, generator=g), torch.randn(1, n, v, generator=g)
        targets[0, : n // 2] = logits[0, : n // 2]  # some correct predictions
        mask = (torch.rand(1, n, generator=g) < 0.6).long() if trial % 4 else None
        prev = torch.rand(1, n, generator=g) < 0.7 if trial % 3 else None
        got = []
        for f in funcs:
            p = None if prev is None else prev.clone()
            full, cond = f(logits, targets, mask, p)
            got.append((full, cond, p))
        (f0, c0, p0), (f1, c1, p1) = got
        assert torch.equal(torch.as_tensor(f0), torch.as_tensor(f1)), (trial, f0, f1)
        assert torch.equal(torch.as_tensor(c0), torch.as_tensor(c1)), (trial, c0, c1)
        assert (p0 is None and p1 is None) or torch.equal(p0, p1)  # prev_correct is updated in place alike
