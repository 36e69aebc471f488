"""SFT's error-recovery demonstrations (``sft.reader_echo``): with every not-found reply echoed, the real
teacher's transcripts on config_lookup show its answer check catching the echo, still end correct, and no
echoed reply becomes a reader row (logs_next, where the echo was first seen, is answered in code now)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat
from fathom.tasks import generate_task
from fathom.train.config import ConfigError
from fathom.train.configfile import load_config
from fathom.train.sft import collect_transcripts, reader_echoes, reader_rows, trainable

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"


def config(tmp_path, *extra):
    return load_config(
        TINY,
        [
            f"--run.run_dir={tmp_path}",
            "--logging.progress=false",
            "--sft.max_turns=12",
            "--sft.max_length=1048576",
            "--rollout.max_new_tokens=384",
            "--sft.reader_ratio=100",
            "--rollout.sub_max_input_tokens=4096",  # the proof's Qwen reader view (tiny-cpu's is 512)
            *extra,
        ],
    )


@pytest.fixture(scope="module")
def echoed(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("echo")
    cfg = config(run_dir, "--sft.reader_echo=1")
    tokenizer = load_tokenizer(ModelSpec("tiny-qwen"))  # the Qwen2.5 tokenizer, as the student's
    # reads that reach a chunk without the answer (the asked section's lines, without the key it inherits)
    tasks = [generate_task("config_lookup", seed, 8192) for seed in (0, 3, 6)]
    calls: list = []
    records = collect_transcripts(cfg, tokenizer, tasks, calls)
    return cfg, run_dir, records, calls


def test_every_transcript_shows_a_caught_echo_and_still_ends_correct(echoed):
    cfg, _, records, calls = echoed
    assert any(c["echo"] for c in calls) and not all(c["echo"] for c in calls)
    assert all(r["echo_checks"] >= 1 for r in records)
    assert all(r["correct"] and r["grounding"]["ok"] for r in records)
    usable, _ = trainable(records, cfg)
    assert len(usable) == len(records)


def test_no_echoed_reply_is_a_reader_row_and_the_echoes_are_counted(echoed):
    cfg, run_dir, records, calls = echoed
    (run_dir / "reader_calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    rows, _ = reader_rows(cfg, run_dir, len(records))
    chat = ChatFormat(load_tokenizer(ModelSpec(cfg.model.name)), cfg.model.chat)
    replies = [
        chat.turn_text([t for t, m in zip(r["input_ids"], r["assistant_masks"], strict=True) if m]).strip()
        for r in rows
    ]
    echoes = {(c["prompt"], c["chunk"]) for c in calls if c["echo"]}
    plain = {(c["prompt"], c["chunk"], c["reply"]) for c in calls if not c["echo"]}
    assert len(rows) == len(plain)  # reader_ratio 100 wants more rows than there are calls: all plain ones
    assert not {c["reply"] for c in calls if c["echo"]} & set(replies)
    assert reader_echoes(cfg, run_dir) == len(echoes) > 0


def test_the_echo_share_is_validated(tmp_path):
    with pytest.raises(ConfigError, match=r"sft.reader_echo must be in \[0, 1\]"):
        config(tmp_path, "--sft.reader_echo=1.5")
