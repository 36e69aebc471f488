"""``sft.rows = "reader"``: SFT trains the reader rows alone (a separate reader model), drawn from another
run's recorded calls, with the transcripts only sizing the draw."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat
from fathom.train.config import ConfigError
from fathom.train.configfile import load_config
from fathom.train.reader_sft import reader_examples
from fathom.train.sft import run_sft

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"


def test_the_config_takes_all_or_reader_and_checks_what_reader_needs(tmp_path):
    assert load_config(TINY, []).sft.rows == "all"
    assert load_config(TINY, ["--sft.rows=reader", "--sft.reader_ratio=2"]).sft.rows == "reader"
    with pytest.raises(ConfigError, match=r"sft\.rows must be one of"):
        load_config(TINY, ["--sft.rows=transcripts"])
    with pytest.raises(ConfigError, match="reader_ratio > 0"):
        load_config(TINY, ["--sft.rows=reader", "--sft.reader_ratio=0"])
    with pytest.raises(ConfigError, match="holdout = 0"):
        load_config(TINY, ["--sft.rows=reader", "--sft.reader_ratio=1", "--sft.holdout=0.1"])
    with pytest.raises(ConfigError, match=r"goes with sft\.source = file"):
        load_config(TINY, [f"--sft.reader_calls={tmp_path / 'calls.jsonl'}"])


def reader_run(tmp_path: Path, transcript, ratio: float, calls_file: Path) -> dict:
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-smol")))  # tiny-cpu's model
    records = [transcript(chat, f"t{i}") for i in range(3)]
    (tmp_path / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = load_config(
        TINY,
        [
            f"--run.run_dir={tmp_path / 'reader'}",
            "--logging.progress=false",
            "--model.lora=false",
            "--sft.source=file",
            f"--sft.transcripts={tmp_path / 'transcripts.jsonl'}",
            f"--sft.reader_calls={calls_file}",
            "--sft.rows=reader",
            f"--sft.reader_ratio={ratio}",
            "--sft.epochs=1",
        ],
    )
    return run_sft(cfg)


def test_a_reader_only_run_trains_the_reader_rows_and_no_transcript(tmp_path, transcript):
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-smol")))
    calls = [
        {"prompt": f"Answer.\nQuestion: what is {i}?", "chunk": f"the value is {i}", "reply": f"value {i}"}
        for i in range(8)
    ]
    calls_file = tmp_path / "elsewhere" / "reader_calls.jsonl"
    calls_file.parent.mkdir()
    calls_file.write_text("".join(json.dumps(c) + "\n" for c in calls))
    summary = reader_run(tmp_path, transcript, 2, calls_file)
    # 3 usable transcripts x ratio 2 = 6 rows from the other run's 8 calls; no transcript trained
    assert summary["rows"] == "reader"
    assert summary["trained_on"] == 0 and summary["reader_examples"] == 6
    cfg = load_config(TINY, [])
    rows, _ = reader_examples(
        chat, calls, cfg.rollout.sub_max_input_tokens, cfg.rollout.sub_max_new_tokens, 6, cfg.sft.seed
    )
    # the loss is on the six replies' tokens alone (a transcript row would add its completion's)
    assert summary["assistant_tokens"] == sum(sum(r["assistant_masks"]) for r in rows)
    assert summary["assistant_loss_after"] < summary["assistant_loss_before"]
    assert (tmp_path / "reader" / "final").is_dir()


def test_a_reader_only_run_without_calls_says_where_it_looked(tmp_path, transcript):
    missing = tmp_path / "none.jsonl"
    with pytest.raises(RuntimeError, match=f"no reader row from {re.escape(str(missing))}"):
        reader_run(tmp_path, transcript, 1, missing)


@pytest.mark.slow  # ~75 s: the teacher plays four tasks, and the reader rows hold up to 4,096 tokens each
def test_a_reader_only_run_can_record_its_own_calls_by_playing_the_teacher(tmp_path):
    # what `proof.sh reader_sft` does after `restore`, where the SFT run's recorded calls stayed behind
    tier = '[{name="read", lengths=[8192], difficulties=["easy"], families=["manual_default", "glossary_lookup"]}]'
    cfg = load_config(
        TINY,
        [
            f"--run.run_dir={tmp_path}",
            "--logging.progress=false",
            "--model.lora=false",
            "--model.name=tiny-qwen",  # the proof student's tokenizer
            "--sft.source=teacher",
            "--sft.rows=reader",
            "--sft.reader_ratio=2",
            "--sft.num_tasks=4",
            "--sft.max_turns=10",
            "--sft.max_length=1048576",
            "--sft.epochs=1",
            f"--curriculum.tiers={tier}",
            "--eval.tier=0",
            "--rollout.max_new_tokens=384",  # the proof's turn, reader view and reply budget
            "--rollout.sub_max_input_tokens=4096",
            "--rollout.sub_max_new_tokens=128",
        ],
    )
    summary = run_sft(cfg)
    recorded = [json.loads(line) for line in (tmp_path / "reader_calls.jsonl").read_text().splitlines()]
    assert recorded and summary["trained_on"] == 0
    usable = summary["transcripts"] - summary["ungrounded"] - summary["too_long"] - summary["over_budget"]
    assert 0 < summary["reader_examples"] <= 2 * usable
