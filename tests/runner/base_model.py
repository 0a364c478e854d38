"""A base-model folder: the tiny Llama with its chat template removed (as base models ship)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def base_model_of(model: Path, dest: Path) -> Path:
    if not dest.exists():
        shutil.copytree(model, dest)
        (dest / "chat_template.jinja").unlink(missing_ok=True)
        cfg_path = dest / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.pop("chat_template", None)
        cfg_path.write_text(json.dumps(cfg))
    from transformers import AutoTokenizer

    assert not AutoTokenizer.from_pretrained(str(dest)).chat_template
    return dest
