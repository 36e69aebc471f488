"""The recipe callback's wiring with a stand-in trainer: EMA -> tier advance, dual ascent on the penalty,
checkpoint requests on the schedule, control-file updates held to generation boundaries, reporters offline-safe.
"""

from __future__ import annotations

import json
import os
import sys
import types
from types import SimpleNamespace

import pytest

from fathom.train.callbacks import FathomCallback
from fathom.train.config import LoggingConfig
from fathom.train.configfile import load_config
from fathom.train.control import ControlFile
from fathom.train.recipe import initial_state
from fathom.train.rollout_func import StepStats
from fathom.train.runlog import JsonlWriter, read_jsonl, report_to
from fathom.train.tasksource import TaskSource

TIERS = '--curriculum.tiers=[{name="a"}, {name="b", lengths=[16384]}]'


class Rollouts:
    """Hands the callback one step's sums, as FathomRollout does."""

    def __init__(self) -> None:
        self.next = StepStats()

    def take_stats(self) -> StepStats:
        stats, self.next = self.next, StepStats()
        return stats


def make(tmp_path, *overrides):
    config = load_config(
        None,
        [
            f"--run.run_dir={tmp_path}",
            TIERS,
            "--curriculum.ema_alpha=0.5",
            "--curriculum.advance_threshold=0.6",
            "--curriculum.min_dwell_steps=2",
            "--penalty.init=0.1",
            "--penalty.lr=0.5",
            "--penalty.accuracy_floor=0.5",
            "--checkpoint.save_every=5",
            *overrides,
        ],
    )
    recipe = initial_state(config.curriculum, config.penalty, 1.0)
    rollouts = Rollouts()
    names = [t.name for t in config.curriculum.tiers]
    callback = FathomCallback(
        config,
        recipe,
        rollouts,
        TaskSource(config.curriculum.tiers, 0),
        JsonlWriter(tmp_path / "metrics.jsonl"),
        ControlFile(tmp_path / "control.json", names, (0.0, 0.3)),
    )
    accelerator = SimpleNamespace(
        device="cpu", num_processes=1, is_main_process=True, reduce=lambda t, reduction: t
    )
    callback.trainer = SimpleNamespace(accelerator=accelerator)
    return callback, recipe, rollouts


def step(callback, number, max_steps=20):
    control = SimpleNamespace(should_save=False)
    state = SimpleNamespace(global_step=number, max_steps=max_steps)
    callback.on_step_begin(None, state, control)
    callback.on_step_end(None, state, control)
    return control.should_save


def test_ema_advances_the_tier_after_dwell_and_the_penalty_follows_accuracy(tmp_path):
    callback, recipe, rollouts = make(tmp_path)
    saves = []
    for number, (reward, correct) in enumerate([(1.0, 4), (1.0, 4), (0.2, 0)], start=1):
        rollouts.next = StepStats(
            rollouts=4, scored=4, reward_sum=4 * reward, correct_sum=correct, model_tokens=40
        )
        saves.append(step(callback, number))
    assert saves == [True, True, False]  # geometric 1, 2, 4, ... and every 5
    assert recipe.tier_history == [[0, 0], [2, 1]] and recipe.tier == 1  # advanced at step 2 (dwell 2)
    assert recipe.ema == 0.2 and recipe.steps_in_tier == 1  # the new tier's EMA restarted
    # accuracy 1, 1, 0 against a floor of 0.5 with lr 0.5: 0.1 -> 0.3 (clipped) -> 0.3 -> 0.05
    assert recipe.penalty_weight == pytest.approx(0.05)
    assert recipe.examples_seen == 12 and recipe.model_tokens_seen == 120
    assert callback.pending["curriculum/advanced_to"] == 1 and callback.pending["curriculum/ema"] == 0.2
    assert step(callback, 4) and step(callback, 5) and not step(callback, 6)  # no rollouts: state unchanged
    assert recipe.examples_seen == 12


def test_step_metrics_split_generation_into_engine_calls_and_their_mean_time(tmp_path):
    callback, _, rollouts = make(tmp_path)
    rollouts.next = StepStats(
        rollouts=4, scored=4, model_tokens=400, generate_s=6.0, rollout_s=7.0, sampled_tokens=900,
        engine_calls=1500,
    )  # fmt: skip
    step(callback, 1)
    out = callback.pending
    assert out["rollout/engine_calls"] == 1500
    assert out["time/engine_call_ms"] == pytest.approx(4.0)  # 6 s of generation over 1,500 engine steps
    assert out["time/generate_s"] == 6.0 and out["time/env_s"] == pytest.approx(1.0)
    assert out["throughput/generate_tokens_per_s"] == pytest.approx(150.0)


def test_control_updates_wait_for_a_generation_boundary(tmp_path, monkeypatch):
    callback, recipe, _ = make(tmp_path, "--grpo.num_iterations=2")
    applied = []
    monkeypatch.setattr("fathom.train.callbacks.set_loss_temperature", lambda trainer, t: applied.append(t))
    (tmp_path / "control.json").write_text(json.dumps({"temperature": 0.7, "tier": "b"}))
    step(callback, 1)  # mid-way through a generation batch that is optimised twice
    assert recipe.temperature == 1.0 and recipe.tier == 0 and applied == []
    step(callback, 2)
    assert recipe.temperature == 0.7 and recipe.tier == 1 and applied == [0.7]
    step(callback, 3)
    step(callback, 4)
    assert applied == [0.7]  # applied once
    events = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r.get("event")]
    assert events == [
        {"step": 2, "time": events[0]["time"], "event": "control_applied", "temperature": 0.7, "tier": 1}
    ]
    logs = {"loss": 0.5}
    callback.on_log(None, SimpleNamespace(global_step=4, is_world_process_zero=True), None, logs=logs)
    assert read_jsonl(tmp_path / "metrics.jsonl")[-1]["loss"] == 0.5


def test_reporters_fail_fast_when_missing_and_wandb_stays_offline(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed: importing it raises
    with pytest.raises(RuntimeError, match="pip install tensorboard"):
        report_to(LoggingConfig(tensorboard=True), tmp_path)
    assert report_to(LoggingConfig(), tmp_path) == []
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))
    for name in ("WANDB_PROJECT", "WANDB_DIR"):  # recorded, so the test leaves the environment as it was
        monkeypatch.setenv(name, "x")
    monkeypatch.setenv("WANDB_MODE", "online")  # the recipe wins over a stray environment variable
    assert report_to(LoggingConfig(wandb=True), tmp_path) == ["wandb"]
    assert os.environ["WANDB_MODE"] == "offline"
