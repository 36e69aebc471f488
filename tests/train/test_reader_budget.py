"""Reader rows whose reply does not fit the policy's reply budget (``rollout.sub_max_new_tokens``) are not
trained on, and SFT's summary counts them: the policy would be cut off in such an answer."""

from __future__ import annotations

import json
from pathlib import Path

from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat
from fathom.tasks.records import LABELS
from fathom.train.configfile import load_config
from fathom.train.reader_sft import reader_examples, reply_ids
from fathom.train.sft import run_sft

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
PROMPT = "Classify each line below into exactly one category: a, b. Reply with one category per line."


def labelling_call(n: int) -> dict[str, str]:
    """A recorded labelling call of `n` records, answered one label per line."""
    labels = [LABELS[i % len(LABELS)] for i in range(n)]
    return {"prompt": PROMPT, "chunk": "\n".join(f"record {i}" for i in range(n)), "reply": "\n".join(labels)}


def test_a_reply_over_the_budget_is_left_out_and_counted():
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))  # the Qwen2.5 tokenizer
    short, long = labelling_call(10), labelling_call(100)
    budget = len(reply_ids(chat, short["reply"]))  # the short reply with its end-of-turn token
    assert reply_ids(chat, short["reply"])[-1] == chat.eos_id
    assert len(reply_ids(chat, long["reply"])) > 2 * budget
    rows, over = reader_examples(chat, [short, long, short], 4096, budget, 10, seed=0)
    assert over == 1  # the long one; the duplicate of the short one is one call
    assert len(rows) == 1 and sum(rows[0]["assistant_masks"]) == budget
    assert chat.turn_text(rows[0]["input_ids"][-budget:]).strip() == short["reply"]
    rows, over = reader_examples(chat, [short, long], 4096, budget - 1, 10, seed=0)
    assert (rows, over) == ([], 2)  # one token less: the short reply no longer fits either


def test_rows_are_drawn_from_the_fitting_calls_only():
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))
    calls = [labelling_call(5 + i) for i in range(4)] + [labelling_call(200 + i) for i in range(4)]
    rows, over = reader_examples(chat, calls, 4096, 64, 6, seed=3)  # wants 6, only 4 fit
    assert (len(rows), over) == (4, 4)
    assert all(sum(r["assistant_masks"]) <= 64 for r in rows)


def test_the_sft_summary_counts_the_reader_replies_over_budget(tmp_path, transcript):
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-smol")))  # tiny-cpu's model: SmolLM2's tokenizer
    short, long = labelling_call(3), labelling_call(60)
    budget = len(reply_ids(chat, short["reply"])) + 2
    assert len(reply_ids(chat, long["reply"])) > budget
    record = transcript(chat)
    run_dir = tmp_path / "sft"
    run_dir.mkdir()
    (tmp_path / "transcripts.jsonl").write_text(json.dumps(record) + "\n")
    echo = {"prompt": "Answer.\nQuestion: Where is KEY-7?", "chunk": "x", "reply": "KEY-7", "echo": True}
    assert len(reply_ids(chat, echo["reply"])) <= budget  # it would fit: only being an echo keeps it out
    (run_dir / "reader_calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in (short, long, echo)))
    cfg = load_config(
        TINY,
        [
            f"--run.run_dir={run_dir}",
            f"--rollout.sub_max_new_tokens={budget}",
            "--logging.progress=false",
            "--model.lora=false",
            "--sft.source=file",
            f"--sft.transcripts={tmp_path / 'transcripts.jsonl'}",
            "--sft.epochs=1",
            "--sft.reader_ratio=2",  # two rows wanted: only the short call fits and is not an echo
        ],
    )
    summary = run_sft(cfg)
    assert (summary["trained_on"], summary["reader_examples"]) == (1, 1)
    assert (summary["reader_reply_budget"], summary["reader_over_budget"]) == (budget, 1)
    assert (summary["reader_echoes"], summary["transcripts_with_echo"]) == (1, 0)
    assert json.loads((run_dir / "summary.json").read_text())["reader_over_budget"] == 1
