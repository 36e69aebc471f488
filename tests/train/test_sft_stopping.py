"""SFT's stopping rule: best held-out loss kept, patience and the entropy floor stop it, summary says why."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import TrainerControl

from fathom.train.config import ConfigError
from fathom.train.configfile import load_config
from fathom.train.sft import run_sft, split_heldout
from fathom.train.sft_stopping import HeldoutStopping

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
NIAH = '--curriculum.tiers=[{name="niah", lengths=[8192], families=["niah", "vartrack", "keychain"]}]'


def config(run_dir, *extra):
    return load_config(TINY, [f"--run.run_dir={run_dir}", NIAH, "--logging.progress=false", *extra])


def evaluate(rule: HeldoutStopping, step: int, loss: float, entropy: float = 1.0) -> TrainerControl:
    state = SimpleNamespace(global_step=step, epoch=step / 10)
    return rule.on_evaluate(None, state, TrainerControl(), {"eval_loss": loss, "eval_entropy": entropy})


def test_the_best_loss_is_kept_and_patience_stops():
    model = torch.nn.Linear(2, 2)
    rule = HeldoutStopping(model, patience=2, entropy_floor=0.1)
    with torch.no_grad():
        model.weight.fill_(1.0)
    assert not evaluate(rule, 1, 3.0).should_training_stop
    with torch.no_grad():
        model.weight.fill_(2.0)
    assert not evaluate(rule, 2, 2.0).should_training_stop  # the best: weights 2.0
    with torch.no_grad():
        model.weight.fill_(3.0)
    assert not evaluate(rule, 3, 2.5).should_training_stop
    assert evaluate(rule, 4, 2.6).should_training_stop  # two evaluations without improvement
    rule.restore_best()
    assert torch.all(model.weight == 2.0)
    summary = rule.record.summary()
    assert summary["chosen_step"] == 2 and summary["stopped_at"] == 4
    assert summary["chosen_heldout_loss"] == 2.0 and "did not improve for 2" in summary["reason"]
    assert [e["loss"] for e in summary["evaluations"]] == [3.0, 2.0, 2.5, 2.6]


def test_entropy_under_the_floor_stops_and_is_never_chosen():
    model = torch.nn.Linear(2, 2)
    rule = HeldoutStopping(model, patience=5, entropy_floor=0.05)
    with torch.no_grad():
        model.weight.fill_(1.0)
    evaluate(rule, 1, 2.0, entropy=0.4)
    with torch.no_grad():
        model.weight.fill_(7.0)
    # a lower loss, but the policy no longer explores: stop, and keep step 1
    assert evaluate(rule, 2, 0.5, entropy=0.01).should_training_stop
    rule.restore_best()
    assert torch.all(model.weight == 1.0)
    assert rule.record.best_step == 1 and "under the floor" in rule.record.reason


def test_nothing_stops_before_min_epochs_and_the_floor_still_decides_what_is_kept():
    model = torch.nn.Linear(2, 2)
    rule = HeldoutStopping(model, patience=1, entropy_floor=0.05, min_epochs=1.0)
    with torch.no_grad():
        model.weight.fill_(1.0)
    assert not evaluate(rule, 4, 2.0, entropy=0.4).should_training_stop  # epoch 0.4: kept
    with torch.no_grad():
        model.weight.fill_(5.0)
    # epoch 0.6: a lower loss under the floor, and epoch 0.8: no improvement. Either would stop a run
    # without min_epochs; neither is kept
    assert not evaluate(rule, 6, 1.0, entropy=0.01).should_training_stop
    assert not evaluate(rule, 8, 3.0, entropy=0.3).should_training_stop
    assert rule.record.best_step == 4 and rule.record.stopped_at is None
    with torch.no_grad():
        model.weight.fill_(9.0)
    assert not evaluate(rule, 10, 1.5, entropy=0.2).should_training_stop  # epoch 1.0: the new best
    assert evaluate(rule, 12, 1.6, entropy=0.2).should_training_stop  # patience, now that it may stop
    rule.restore_best()
    assert torch.all(model.weight == 9.0)
    assert rule.record.summary()["chosen_step"] == 10 and rule.record.stopped_at == 12


def test_min_epochs_may_not_exceed_epochs(tmp_path):
    with pytest.raises(ConfigError, match=r"sft\.min_epochs"):
        config(tmp_path, "--sft.epochs=1", "--sft.min_epochs=1.5")
    assert config(tmp_path, "--sft.epochs=2", "--sft.min_epochs=1").sft.min_epochs == 1.0


def test_split_heldout_holds_out_whole_tasks_deterministically():
    records = [{"task_id": f"t{i}"} for i in range(10)]
    trained, held = split_heldout(records, 0.2, seed=3)
    assert len(held) == 2 and len(trained) == 8
    assert {r["task_id"] for r in held}.isdisjoint(r["task_id"] for r in trained)
    # the same tasks whatever order the transcripts came in
    assert {r["task_id"] for r in split_heldout(records[::-1], 0.2, seed=3)[1]} == {
        r["task_id"] for r in held
    }
    assert split_heldout(records, 0.0, seed=3) == (records, [])
    assert len(split_heldout(records[:2], 0.01, seed=3)[1]) == 1


def test_sft_with_a_holdout_evaluates_each_epoch_and_records_the_choice(tmp_path):
    cfg = config(
        tmp_path / "sft",
        "--sft.source=expert",
        "--sft.num_tasks=4",
        "--sft.epochs=2",
        "--sft.learning_rate=3e-2",
        "--model.lora=false",
        "--sft.reader_ratio=0",
        "--sft.holdout=0.25",
        "--sft.patience=5",
    )
    summary = run_sft(cfg)
    assert summary["trained_on"] == 3 and summary["heldout_transcripts"] == 1
    stop = summary["stopping"]
    per_epoch = math.ceil(3 / (cfg.sft.per_device_train_batch_size * cfg.sft.gradient_accumulation_steps))
    assert [e["step"] for e in stop["evaluations"]] == [per_epoch, 2 * per_epoch]  # once an epoch
    losses = {e["step"]: e["loss"] for e in stop["evaluations"]}
    assert stop["chosen_step"] == min(losses, key=losses.get) and stop["reason"] == "epochs done"
    # the exported model is the chosen one: its held-out loss is the chosen evaluation's
    assert abs(summary["heldout_loss_after"] - stop["chosen_heldout_loss"]) < 1e-3


def test_sft_stops_at_the_first_evaluation_under_an_entropy_floor(tmp_path):
    cfg = config(
        tmp_path / "sft",
        "--sft.source=expert",
        "--sft.num_tasks=4",
        "--sft.epochs=3",
        "--model.lora=false",
        "--sft.reader_ratio=0",
        "--sft.holdout=0.25",
        "--sft.entropy_floor=1000",  # no model is that uncertain: the first evaluation stops it
    )
    stop = run_sft(cfg)["stopping"]
    per_epoch = math.ceil(3 / (cfg.sft.per_device_train_batch_size * cfg.sft.gradient_accumulation_steps))
    assert len(stop["evaluations"]) == 1 and stop["stopped_at"] == per_epoch
    assert stop["chosen_step"] is None and "under the floor 1000" in stop["reason"]
