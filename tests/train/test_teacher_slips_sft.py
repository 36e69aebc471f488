"""SFT rows of a slipped teacher transcript: the faulty turns get loss mask 0, the repairs are trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fathom.models import ModelSpec, load_tokenizer
from fathom.policies.readers import teacher_reader
from fathom.policies.teacher import slip_turns, teacher_backend
from fathom.rollout import ChatFormat, RolloutConfig
from fathom.rollout.wiring import build_engine, hf_service
from fathom.tasks import generate_task
from fathom.train.config import ConfigError, SFTConfig
from fathom.train.configfile import load_config
from fathom.train.sft import run_sft, to_example, turn_lengths


@pytest.fixture(scope="module")
def record():
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))
    engine = build_engine(
        hf_service(teacher_backend(chat, 0, slips=0.5)),
        chat,
        RolloutConfig(max_turns=24, max_total_tokens=1 << 20),
        teacher_reader(),
    )
    episode = engine.run_sync([generate_task("bundle_locate", 0, 8192)])[0]
    conversation = chat.tokenizer.decode(episode.prompt_ids + episode.completion_ids)
    return {
        "task_id": "t",
        "prompt_ids": episode.prompt_ids,
        "completion_ids": episode.completion_ids,
        "env_mask": episode.env_mask,
        "slip_turns": slip_turns(conversation, 0, 0.5),
        "turns": [len(t.ids) for t in episode.turns],
        "correct": episode.correct,
    }


def test_slip_turns_get_mask_zero_and_their_repairs_mask_one(record):
    assert record["correct"] and record["slip_turns"]  # the share slipped some cells and still answered
    example = to_example(record)
    mask = example["assistant_masks"][len(record["prompt_ids"]) :]
    lengths = turn_lengths(record)
    assert lengths == record["turns"]
    starts = []
    for i, m in enumerate(record["env_mask"]):  # where each turn's run of 1 begins
        if m and (i == 0 or not record["env_mask"][i - 1]):
            starts.append(i)
    for turn, (start, n) in enumerate(zip(starts, lengths, strict=True)):
        want = 0 if turn in record["slip_turns"] else 1
        assert mask[start : start + n] == [want] * n, turn
    repairs = {t + 1 for t in record["slip_turns"]}
    assert repairs and not repairs & set(record["slip_turns"])
    masked = sum(lengths[t] for t in record["slip_turns"])
    assert sum(mask) == sum(record["env_mask"]) - masked
    assert sum(to_example({**record, "slip_turns": []})["assistant_masks"]) == sum(record["env_mask"])


def test_a_slip_turn_past_the_last_turn_is_an_error(record):
    with pytest.raises(ValueError, match="past its last turn"):
        to_example({**record, "slip_turns": [len(record["turns"])]})


@pytest.mark.parametrize("share", [-0.1, 1.5])
def test_teacher_slips_outside_0_1_is_refused(share):
    with pytest.raises(ConfigError, match="teacher_slips"):
        SFTConfig(teacher_slips=share)
    assert SFTConfig().teacher_slips == 0.0


@pytest.mark.slow  # ~70 s on 2 cores: one SFT epoch of the tiny Qwen model over a 24-turn transcript
def test_the_sft_summary_counts_the_slip_turns_it_trained_around(record, tmp_path):
    path = tmp_path / "transcripts.jsonl"
    rows = [{**record, "family": "bundle_locate", "length_tokens": 8192, "grounding": {"ok": True}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_config(
        Path(__file__).parents[2] / "configs" / "tiny-cpu.toml",
        [
            f"--run.run_dir={tmp_path / 'sft'}",
            "--model.name=tiny-qwen",  # the tokenizer the record was written with
            "--model.lora=false",
            "--logging.progress=false",
            "--rollout.max_new_tokens=4096",
            f"--sft.max_length={len(record['prompt_ids']) + len(record['completion_ids']) + 8}",
            "--sft.source=file",
            f"--sft.transcripts={path}",
            "--sft.epochs=1",
            "--sft.reader_ratio=0",
            "--sft.teacher_slips=0.5",
        ],
    )
    summary = run_sft(cfg)
    assert summary["trained_on"] == 1 and summary["teacher_slips"] == 0.5
    assert summary["slip_turns"] == len(record["slip_turns"]) > 0
