"""GRPO resumed in a fresh run dir from a checkpoint carried without its optimizer state, as
`scripts/gpu/proof.sh bring` / `restore` carry one between sessions: the carried checkpoint is also
``model.init_from`` (its adapter gives the model its shape; the SFT adapter does not travel).

What continues: the global step, FATHOM's recipe state, the same adapter (its rank, whatever the flags say),
the metrics file. What restarts, as HF's Trainer does without ``optimizer.pt`` (it loads the optimizer and
the scheduler only together): AdamW's moments and the learning-rate schedule.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from fathom.train import checkpoint
from fathom.train.configfile import load_config
from fathom.train.grpo import run_grpo
from fathom.train.runlog import read_jsonl

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from grpo_driver import FAST, TINY, varied_reward  # noqa: E402

COMMON = [
    *FAST,
    "--eval.every=0",
    "--checkpoint.geometric=false",
    "--checkpoint.save_every=1",
    "--grpo.warmup_steps=2",
    "--grpo.lr_scheduler=constant_with_warmup",
]


def test_a_checkpoint_without_its_optimizer_continues_in_a_fresh_run_dir(tmp_path):
    first = tmp_path / "first"
    run_grpo(load_config(TINY, [*COMMON, f"--run.run_dir={first}", "--grpo.max_steps=1"]), [varied_reward])
    carried = tmp_path / "carried"
    shutil.copytree(
        first / "checkpoint-1", carried / "checkpoint-1", ignore=shutil.ignore_patterns("optimizer.pt")
    )
    shutil.copy(first / "metrics.jsonl", carried / "metrics.jsonl")
    assert not (carried / "checkpoint-1" / "optimizer.pt").exists()
    assert (
        carried / "checkpoint-1" / "scheduler.pt"
    ).exists()  # carried, and not loaded without the optimizer

    args = [f"--run.run_dir={carried}", "--grpo.max_steps=3", f"--model.init_from={carried / 'checkpoint-1'}"]
    summary = run_grpo(load_config(TINY, [*COMMON, *args, "--model.lora_r=4"]), [varied_reward])

    assert summary["steps"] == 3 and summary["resumed_from"] == str(carried / "checkpoint-1")
    rows = [r for r in read_jsonl(carried / "metrics.jsonl") if "loss" in r]  # the step records
    assert [r["step"] for r in rows] == [1, 2, 3]
    lr = {r["step"]: r["learning_rate"] for r in rows}
    # the schedule's warm-up again (a restored scheduler would have gone on: lr[2] > lr[1]): not restored
    assert lr[2] == lr[1] < lr[3]
    before = checkpoint.read_state(first / "checkpoint-1")["recipe"]
    after = checkpoint.read_state(carried / "checkpoint-3")["recipe"]
    assert after["examples_seen"] == 3 * before["examples_seen"] > 0  # the recipe state went on from step 1
    config = json.loads((carried / "final" / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 8  # the carried adapter (tiny-cpu.toml's rank), not a fresh one at --model.lora_r=4
