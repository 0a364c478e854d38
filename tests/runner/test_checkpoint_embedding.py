"""A trained draft's checkpoint leaves out the embedding when it is the verifier's own
(``common.draft_model.drop_shared_embedding``): vLLM and speculators read the verifier's instead.
A different embedding (another verifier's, or one changed by a single value) is kept, so no
reader ever gets the wrong one; the rest of the file is unchanged, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CODE = r"""
import json, sys, torch
from pathlib import Path
from safetensors.torch import load_file, save_file
from eagle3_runner.common.draft_model import drop_shared_embedding

verifier, work = Path(sys.argv[1]), Path(sys.argv[2])
embed = load_file(str(verifier / "model.safetensors"))["model.embed_tokens.weight"]
other = {"fc.weight": torch.randn(8, 24), "d2t": torch.arange(4), "t2d": torch.ones(embed.shape[0], dtype=torch.bool)}
out = {}
for name, e in {"same_bf16": embed.to(torch.bfloat16), "same": embed.clone(),
                "one_value_off": embed.clone().index_put_((torch.tensor([3]), torch.tensor([1])), torch.tensor(9.0)),
                "other_shape": embed[:-1].clone()}.items():
    ckpt = work / name
    ckpt.mkdir()
    save_file({**other, "embed_tokens.weight": e}, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    saved = drop_shared_embedding(ckpt, verifier)
    after = load_file(str(ckpt / "model.safetensors"))
    out[name] = {"saved": saved, "kept": "embed_tokens.weight" in after,
                 "rest_equal": all(torch.equal(after[k], v) for k, v in other.items())}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_only_the_verifiers_own_embedding_is_left_out(tmp_path, tiny_llama, train_site):
    p = subprocess.run([sys.executable, "-c", CODE, str(tiny_llama), str(tmp_path)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(train_site)})
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["same"]["saved"] > 0 and not r["same"]["kept"]
    assert r["same_bf16"]["saved"] == r["same"]["saved"] // 2 and not r["same_bf16"]["kept"]
    for name in ("one_value_off", "other_shape"):
        assert r[name] == {"saved": 0, "kept": True, "rest_equal": True}, name
    assert all(v["rest_equal"] for v in r.values())
