"""SFT trains only the transcripts whose every turn fits the per-turn budget, rollout.max_new_tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat
from fathom.train.configfile import load_config
from fathom.train.sft import run_sft, trainable, turn_lengths

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
SHORT = ["First I look.\n```repl\nprint(len(ctx))\n```", "```repl\nFINAL('Rome')\n```"]
LONG = [
    SHORT[0],
    "Every line.\n```repl\n" + "\n".join(f"print(ctx.count('w{i}'))" for i in range(40)) + "\n```",
]


@pytest.fixture(scope="module")
def chat():
    return ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))  # the real Qwen2.5 tokenizer: the student's


def transcript(chat, task_id, turns, correct=True, grounded=True):
    """A record as `collect_transcripts` writes it: each policy turn's ids and end-of-turn token (mask 1),
    an environment reply between two turns (mask 0)."""
    completion, mask = [], []
    for i, text in enumerate(turns):
        ids = [*chat.tokenizer.encode(text, add_special_tokens=False), chat.eos_id]
        reply = chat.observation_ids(f"[output]\n{i}\n", True) if i < len(turns) - 1 else []
        completion += ids + reply
        mask += [1] * len(ids) + [0] * len(reply)
    return {
        "task_id": task_id,
        "family": "niah",
        "length_tokens": 8192,
        "correct": correct,
        "grounding": {"ok": grounded},
        "prompt_ids": chat.prompt_ids("You write Python.", "Question: Where is the key?"),
        "completion_ids": completion,
        "env_mask": mask,
    }


def tokens(chat, text):
    return len(chat.tokenizer.encode(text, add_special_tokens=False)) + 1


def config(tmp_path, budget, *extra):
    return load_config(
        TINY,
        [
            f"--run.run_dir={tmp_path}",
            f"--rollout.max_new_tokens={budget}",
            "--logging.progress=false",
            *extra,
        ],
    )


def test_turn_lengths_are_the_policys_tokens_of_each_turn(chat):
    assert turn_lengths(transcript(chat, "a", LONG)) == [tokens(chat, t) for t in LONG]
    assert turn_lengths({"env_mask": [1, 1, 0, 0, 1, 0, 1, 1, 1]}) == [2, 1, 3]


def test_a_transcript_with_a_turn_over_the_budget_is_dropped_and_counted(chat, tmp_path):
    budget = max(tokens(chat, t) for t in SHORT)  # the short transcript's longest turn is exactly the budget
    assert tokens(chat, LONG[1]) > budget + 100
    records = [
        transcript(chat, "fits", SHORT),
        transcript(chat, "over", LONG),
        transcript(chat, "wrong", LONG, correct=False),  # not trainable anyway: not counted as over budget
        transcript(chat, "ungrounded", SHORT, grounded=False),
    ]
    usable, dropped = trainable(records, config(tmp_path, budget))
    assert [r["task_id"] for r in usable] == ["fits"]
    assert dropped == {"ungrounded": 1, "too_long": 0, "over_budget": 1, "longest_turn": budget}
    # a transcript longer than sft.max_length is counted as too long, not over the turn budget
    fits = records[0]
    short_len = len(fits["prompt_ids"]) + len(fits["completion_ids"])
    usable, dropped = trainable(records, config(tmp_path, 10_000, f"--sft.max_length={short_len}"))
    assert [r["task_id"] for r in usable] == ["fits"]
    assert (dropped["too_long"], dropped["over_budget"]) == (1, 0)  # the long one, whatever its turns
    with pytest.raises(RuntimeError, match="every one of the 2 correct transcripts"):
        trainable(records, config(tmp_path, budget - 1))  # one token less: the short one no longer fits


def test_no_transcript_within_the_budget_is_an_error(chat, tmp_path):
    records = [transcript(chat, "over", LONG), transcript(chat, "over2", LONG)]
    with pytest.raises(RuntimeError, match=r"budget of 100 new tokens \(rollout\.max_new_tokens"):
        trainable(records, config(tmp_path, 100))
    # no correct transcript at all is the trainer's error, not the budget's
    assert trainable([transcript(chat, "wrong", LONG, correct=False)], config(tmp_path, 100))[0] == []


def test_the_sft_summary_reports_the_budget_and_the_transcripts_over_it(tmp_path):
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-smol")))  # the recipe's model: SmolLM2's tokenizer
    budget = max(tokens(chat, t) for t in SHORT) + 5
    path = tmp_path / "transcripts.jsonl"
    records = [transcript(chat, "fits", SHORT), transcript(chat, "over", LONG)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = config(
        tmp_path / "sft",
        budget,
        "--model.lora=false",
        "--sft.source=file",
        f"--sft.transcripts={path}",
        "--sft.epochs=1",
        "--sft.reader_ratio=0",
    )
    summary = run_sft(cfg)
    assert (summary["turn_budget"], summary["over_budget"], summary["trained_on"]) == (budget, 1, 1)
    assert summary["longest_turn"] == max(tokens(chat, t) for t in SHORT) <= budget
    assert json.loads((tmp_path / "sft" / "summary.json").read_text())["over_budget"] == 1
