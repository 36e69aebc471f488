"""``sft.reader_batches = "own"``: every SFT optimizer step holds reader rows only or transcripts only, so a
reader row's few loss tokens are not averaged into a transcript's thousand (fathom.train.sft_batches)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat
from fathom.train.config import ConfigError
from fathom.train.configfile import load_config
from fathom.train.sft import run_sft
from fathom.train.sft_batches import KindBlockSampler

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"


def windows(order: list[int], block: int) -> list[list[int]]:
    return [order[at : at + block] for at in range(0, len(order), block)]


@pytest.mark.parametrize(
    ("transcripts", "readers", "block"), [(40, 40, 8), (37, 21, 8), (5, 3, 4), (3, 0, 2)]
)
def test_each_step_holds_one_kind_and_every_row_comes_once(transcripts, readers, block):
    kinds = ["transcript"] * transcripts + ["reader"] * readers
    sampler = KindBlockSampler(kinds, block, seed=0)
    order = list(sampler)
    assert sorted(order) == list(range(len(kinds))) and len(sampler) == len(kinds)
    steps = windows(order, block)
    mixed = [w for w in steps if len({kinds[i] for i in w}) > 1]
    # only the rows left over of each kind (fewer than a block) may share a step: at most one such step
    assert len(mixed) <= 1
    assert all(len(w) == block for w in steps[:-1])  # a short step only at the very end
    if transcripts % block == 0 and readers % block == 0:
        assert not mixed


def test_the_order_is_drawn_again_each_epoch_and_repeats_for_a_seed():
    kinds = ["transcript"] * 24 + ["reader"] * 24
    first, second = KindBlockSampler(kinds, 4, seed=1), KindBlockSampler(kinds, 4, seed=1)
    epoch1, epoch2 = list(first), list(first)
    assert epoch1 != epoch2
    assert list(second) == epoch1 and list(second) == epoch2
    assert list(KindBlockSampler(kinds, 4, seed=2)) != epoch1
    # the kinds are interleaved across steps, not all of one kind first
    step_kinds = [kinds[w[0]] for w in windows(epoch1, 4)]
    assert step_kinds != sorted(step_kinds) and step_kinds != sorted(step_kinds, reverse=True)


def test_a_block_must_hold_a_row():
    with pytest.raises(ValueError, match="block must be >= 1"):
        KindBlockSampler(["reader"], 0, seed=0)


def test_the_config_takes_mixed_or_own_only():
    assert load_config(TINY, []).sft.reader_batches == "mixed"
    assert load_config(TINY, ["--sft.reader_batches=own"]).sft.reader_batches == "own"
    with pytest.raises(ConfigError, match="reader_batches"):
        load_config(TINY, ["--sft.reader_batches=apart"])


@pytest.mark.parametrize("batches", ["mixed", "own"])
def test_sft_trains_reader_rows_in_steps_of_their_own_when_asked(tmp_path, monkeypatch, transcript, batches):
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-smol")))  # tiny-cpu's model
    run_dir = tmp_path / "sft"
    run_dir.mkdir()
    records = [transcript(chat, f"t{i}") for i in range(4)]
    (tmp_path / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    calls = [
        {"prompt": f"Answer.\nQuestion: what is {i}?", "chunk": f"the value is {i}", "reply": str(i)}
        for i in range(4)
    ]
    (run_dir / "reader_calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    seen: list[tuple[str, list[int]]] = []

    class Recording(KindBlockSampler):
        def __iter__(self):
            order = list(super().__iter__())
            seen.append(("order", order))
            return iter(order)

    monkeypatch.setattr("fathom.train.sft_batches.KindBlockSampler", Recording)
    cfg = load_config(
        TINY,
        [
            f"--run.run_dir={run_dir}",
            "--logging.progress=false",
            "--model.lora=false",
            "--sft.source=file",
            f"--sft.transcripts={tmp_path / 'transcripts.jsonl'}",
            "--sft.epochs=1",
            "--sft.reader_ratio=1",
            "--sft.per_device_train_batch_size=2",
            "--sft.gradient_accumulation_steps=2",
            f"--sft.reader_batches={batches}",
        ],
    )
    summary = run_sft(cfg)
    assert summary["reader_examples"] == 4 and summary["reader_batches"] == batches
    if batches == "mixed":
        assert seen == []  # the trainer's own random sampler
        return
    (_, order), *_ = seen
    # rows 0-3 are the transcripts, 4-7 the reader rows; a step is 2 rows x 2 accumulation steps
    assert sorted(order) == list(range(8))
    assert all(len({i < 4 for i in w}) == 1 for w in windows(order, 4))
