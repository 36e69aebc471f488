"""GRPO on CPU with the tiny model, the real environment and real sandboxes.

One three-step run (module fixture) is shared by most tests: parameters move, metrics and untruncated traces
are written, checkpoints follow the schedule, the adapter and a merged 16-bit model are exported, and a
control file written while the run is live changes the temperature and the tier. Separately: environment
tokens get exactly zero gradient through TRL's loss, and a run killed with SIGKILL resumes on the same curve.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from fathom.train import checkpoint
from fathom.train.config import load_config
from fathom.train.grpo import build_grpo, train_run
from fathom.train.runlog import read_jsonl
from fathom.train.tasksource import slot_prompt

HERE = Path(__file__).parent
TINY = HERE.parents[1] / "configs" / "tiny-cpu.toml"
sys.path.insert(0, str(HERE))
from grpo_driver import varied_reward  # noqa: E402

FAST = [
    "--grpo.per_device_train_batch_size=2",  # one group of two rollouts per step
    "--rollout.max_new_tokens=24",
    "--rollout.max_total_tokens=160",
    "--logging.progress=false",
]


class ControlWriter(TrainerCallback):
    """Plays the operator: a bad control file before step 1, a valid one while step 2 runs."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            self.path.write_text("{not json")
        if state.global_step == 1:
            self.path.write_text(json.dumps({"temperature": 0.5, "tier": "16k-mixed", "penalty_weight": 0.2}))


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("grpo")
    config = load_config(TINY, [*FAST, f"--run.run_dir={run_dir}", "--grpo.max_steps=3", "--eval.every=2"])
    run = build_grpo(config, [varied_reward])
    model = run.trainer.model
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    run.trainer.add_callback(ControlWriter(run_dir / "control.json"))
    summary = train_run(run)
    after = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return run, summary, before, after


def steps_of(rows):
    return [r for r in rows if "loss" in r]


def test_steps_change_the_trainable_parameters(grpo_run):
    run, summary, before, after = grpo_run
    assert summary["steps"] == 3 and len(before) > 0
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert len(changed) == len(before)  # every LoRA matrix moved
    frozen = [p for n, p in run.trainer.model.named_parameters() if not p.requires_grad]
    assert frozen  # the base stays frozen under LoRA


def test_metrics_log_every_component_behaviour_and_timing(grpo_run):
    run, *_ = grpo_run
    rows = steps_of(read_jsonl(run.run_dir / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in (
        "reward/env",
        "reward/shaped",
        "reward/format",
        "reward/correctness",
        "reward/token_budget",
        "reward/recursion",
        "reward/penalty",
        "reward/rank_bonus",
        "accuracy",
        "behaviour/turns",
        "behaviour/code_errors",
        "behaviour/timeouts",
        "behaviour/subcalls",
        "behaviour/llm_chars",
        "behaviour/blind_answer",
        "time/generate_s",
        "time/env_s",
        "time/optimise_s",
        "curriculum/tier",
        "curriculum/penalty_weight",
        "curriculum/temperature",
        "rewards/varied_reward/mean",
    ):
        assert all(key in r for r in rows), key
    assert rows[0]["behaviour/turns"] == 2.0  # max_turns = 2 and the tiny model never answers
    assert rows[-1]["progress/examples_seen"] == 6
    assert "eval/accuracy" in rows[1] and "eval/accuracy" not in rows[0]  # eval.every = 2


def test_traces_are_whole_conversations(grpo_run):
    run, *_ = grpo_run
    traces = read_jsonl(run.run_dir / "traces.jsonl")
    train = [t for t in traces if t["kind"] == "train"]
    assert [t["step"] for t in train] == [1, 1, 2, 2, 3, 3]
    assert train[0]["task_id"] == train[1]["task_id"]  # a group shares its task
    for t in train:
        assert t["conversation"].startswith("<|im_start|>system\nYou answer questions about a document")
        assert t["question"] in t["conversation"]
        assert len(t["trace"]["turns"]) == 2 and t["trace"]["turns"][0]["observation"] in t["conversation"]
    assert sum(t["kind"] == "eval" for t in traces) == 4


def test_control_file_steers_temperature_tier_and_penalty_live(grpo_run):
    run, *_ = grpo_run
    lines = read_jsonl(run.run_dir / "metrics.jsonl")
    errors = [r for r in lines if r.get("event") == "control_error"]
    applied = [r for r in lines if r.get("event") == "control_applied"]
    assert len(errors) == 1 and "not valid JSON" in errors[0]["error"] and errors[0]["step"] == 1
    assert len(applied) == 1 and applied[0]["step"] == 2 and applied[0]["tier"] == 1
    rows = steps_of(lines)
    assert [r["curriculum/temperature"] for r in rows] == [1.0, 1.0, 0.5]  # applied after step 2
    assert [r["curriculum/tier"] for r in rows] == [0.0, 0.0, 1.0]
    assert rows[2]["curriculum/penalty_weight"] == pytest.approx(0.2)
    tiers = [t["tier"] for t in read_jsonl(run.run_dir / "traces.jsonl") if t["kind"] == "train"]
    assert tiers == ["8k-easy"] * 4 + ["16k-mixed"] * 2
    assert run.trainer.temperature == 0.5  # the loss scores tokens at the new sampling temperature
    assert run.recipe.tier_history[-1] == [2, 1]


def test_checkpoints_and_export(grpo_run):
    run, summary, *_ = grpo_run
    assert summary["exported"] == {
        "adapter": str(run.run_dir / "final" / "adapter"),
        "merged": str(run.run_dir / "final" / "merged"),
    }
    assert [s for s, _ in checkpoint.checkpoints(run.run_dir)] == [1, 2, 3]
    state = checkpoint.read_state(run.run_dir / "checkpoint-3")
    assert state["step"] == 3 and state["recipe"]["tier"] == 1
    for name in ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth", "config.toml"):
        assert (run.run_dir / "checkpoint-3" / name).exists(), name
    final = run.run_dir / "final"
    assert (final / "adapter" / "adapter_config.json").exists()
    merged = load_file(final / "merged" / "model.safetensors")
    assert {t.dtype for t in merged.values()} == {torch.bfloat16}
    assert not any("lora" in k for k in merged)
    assert not list(run.run_dir.glob(".tmp-*"))


def test_environment_tokens_get_zero_gradient(tmp_path):
    config = load_config(TINY, [*FAST, f"--run.run_dir={tmp_path}", "--grpo.max_steps=1"])
    run = build_grpo(config)
    trainer = run.trainer
    inputs = trainer._generate_and_score_completions([{"prompt": slot_prompt(0)}] * 2)
    completion, tool = inputs["completion_mask"], inputs["tool_mask"]
    env = (completion == 1) & (tool == 0)
    sampled = (completion == 1) & (tool == 1)
    assert env.sum() > 0 and sampled.sum() > 0  # both kinds of token are in the sequence (env ones attended)
    inputs["advantages"] = torch.tensor([1.0, -1.0])  # the tiny model's rewards tie; force a signal
    captured = {}
    original = trainer._get_per_token_logps_and_entropies

    def capture(*args, **kwargs):
        logps, entropies, aux = original(*args, **kwargs)
        logps.retain_grad()
        captured["logps"] = logps
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = capture
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which we bypass here
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grad = captured["logps"].grad  # (B, T): d loss / d log p(token)
    assert torch.count_nonzero(grad[env]) == 0
    assert torch.count_nonzero(grad[sampled]) == int(sampled.sum())
    assert (grad[0][sampled[0]] < 0).all() and (grad[1][sampled[1]] > 0).all()  # the advantage's sign


def _metric_rows(run_dir: Path) -> list[dict]:
    keys = (
        "loss",
        "grad_norm",
        "reward",
        "entropy",
        "rewards/varied_reward/mean",
        "curriculum/penalty_weight",
    )
    return [{k: r[k] for k in ("step", *keys)} for r in steps_of(read_jsonl(run_dir / "metrics.jsonl"))]


def _driver(run_dir: Path, steps: int) -> list[str]:
    args = [*FAST, f"--run.run_dir={run_dir}", f"--grpo.max_steps={steps}", "--eval.every=2"]
    return [sys.executable, str(HERE / "grpo_driver.py"), *args]


def test_sigkill_and_resume_continues_the_same_curve(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(_driver(whole, 3), check=True, capture_output=True, timeout=600)
    proc = subprocess.Popen(
        _driver(killed, 3), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not (killed / "checkpoint-2").exists():
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.0)  # into step 3, whose rollouts may already be in traces.jsonl
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its sandbox workers, nothing else
        proc.wait()
    assert checkpoint.latest(killed).name == "checkpoint-2" and not (killed / "final").exists()
    subprocess.run(_driver(killed, 3), check=True, capture_output=True, timeout=600)

    assert json.loads((killed / "summary.json").read_text())["resumed_from"].endswith("checkpoint-2")
    a, b = _metric_rows(whole), _metric_rows(killed)
    assert [r["step"] for r in b] == [1, 2, 3]
    for ra, rb in zip(a, b, strict=True):
        assert ra == pytest.approx(rb, rel=1e-5, abs=1e-7), ra["step"]
    state_a = checkpoint.read_state(whole / "checkpoint-3")
    state_b = checkpoint.read_state(killed / "checkpoint-3")
    assert state_a == state_b and state_a["recipe"]["examples_seen"] == 6
    trainer_a = json.loads((whole / "checkpoint-3" / "trainer_state.json").read_text())
    trainer_b = json.loads((killed / "checkpoint-3" / "trainer_state.json").read_text())
    assert trainer_a["global_step"] == trainer_b["global_step"] == 3
    assert trainer_a["num_input_tokens_seen"] == trainer_b["num_input_tokens_seen"]
    wa = load_file(whole / "final" / "adapter" / "adapter_model.safetensors")
    wb = load_file(killed / "final" / "adapter" / "adapter_model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-5, atol=1e-7)
    traces = [t["step"] for t in read_jsonl(killed / "traces.jsonl") if t["kind"] == "train"]
    assert traces == [1, 1, 2, 2, 3, 3]  # whatever the killed run wrote of step 3 was dropped
