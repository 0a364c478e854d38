"""A model folder checked before anything loads it: missing, not a folder, empty, no
``config.json`` or no tokenizer files each get one line and exit 6, instead of what
transformers says about a path it then takes for a hub repo id."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import EnvironmentProblem

# One of these makes a tokenizer (fast, sentencepiece, BPE, WordPiece, tiktoken).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "sentencepiece.bpe.model",
                   "vocab.json", "vocab.txt", "tiktoken.model")


def check_model_folder(path: Path | str, *, tokenizer: bool = True, what: str = "model") -> Path:
    """``path`` if it is a local Hugging Face model folder (with tokenizer files when
    ``tokenizer``), else :class:`EnvironmentProblem` saying what is wrong in one line."""
    folder = Path(path)
    if not folder.exists():
        raise EnvironmentProblem(f"{what} folder not found: {folder}")
    if not folder.is_dir():
        raise EnvironmentProblem(f"{what} is not a folder: {folder} (a local Hugging Face model folder is expected)")
    try:
        names = set(os.listdir(folder))
    except OSError as exc:
        raise EnvironmentProblem(f"cannot read the {what} folder {folder}: {exc.strerror}") from None
    if not names:
        raise EnvironmentProblem(f"{what} folder is empty: {folder}")
    if "config.json" not in names:
        raise EnvironmentProblem(f"no config.json in {folder}: not a Hugging Face model folder")
    if tokenizer and not (names & set(TOKENIZER_FILES) or any(n.endswith(".tiktoken") for n in names)):
        raise EnvironmentProblem(f"no tokenizer files in {folder} (looked for {', '.join(TOKENIZER_FILES)}, "
                                 f"*.tiktoken)")
    return folder
