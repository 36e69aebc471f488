"""GRPO on two CPU processes through ``accelerate launch`` (gloo): what scripts/gpu/multigpu.sh runs on GPUs.

- DDP (configs/accelerate/ddp.yaml): both ranks roll out their own groups every step, the metrics rank 0
  logs are global (means over both ranks' rollouts, counts summed), and the tasks per step are those of a
  single-process run with the same global batch;
- FSDP2 (configs/accelerate/fsdp.yaml, forced past accelerate's CPU fallback by cpu_fsdp.py): sharded
  LoRA parameters, lockstep generation, sharded checkpoints and the gathered export follow the DDP run step
  for step (same samples, same gradient norms, the same adapter);
- rank death (bench/rank_death.py): a rank killed mid-rollout, or the launcher itself, leaves nothing running.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fathom.train.runlog import read_jsonl

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
ARGS = [
    "--grpo.max_steps=3",
    "--grpo.per_device_train_batch_size=2",  # one group of two per rank and step: 4 rollouts a step
    "--rollout.max_new_tokens=24",
    "--rollout.max_total_tokens=160",
    "--eval.every=0",
    "--logging.progress=false",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(config: str, *script: str) -> list[str]:
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "configs" / "accelerate" / config),
        "--num_processes", "2", "--main_process_port", str(free_port()), "--mixed_precision", "no", *script,
    ]  # fmt: skip


def run(cmd: list[str], log: Path) -> None:
    with log.open("w") as f:
        done = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=600)
    assert done.returncode == 0, log.read_text()[-3000:]


def steps(run_dir: Path) -> list[dict]:
    return [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]


def train_traces(path: Path) -> list[dict]:
    return [t for t in read_jsonl(path) if t["kind"] == "train"]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ddp")
    run(launch("ddp.yaml", str(HERE / "grpo_driver.py"), *ARGS, f"--run.run_dir={run_dir}"), run_dir / "log")
    return run_dir


def test_ddp_ranks_roll_out_their_own_groups_and_metrics_are_global(ddp, tmp_path):
    rank0, rank1 = train_traces(ddp / "traces.jsonl"), train_traces(ddp / "traces.rank1.jsonl")
    for traces in (rank0, rank1):  # every rank made progress: one group of two rollouts at each step
        assert [t["step"] for t in traces] == [1, 1, 2, 2, 3, 3]
    rows = steps(ddp)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        both = [t for t in rank0 + rank1 if t["step"] == row["step"]]
        assert {t["task_id"] for t in both if t in rank0}.isdisjoint(
            {t["task_id"] for t in both if t in rank1}
        )
        assert row["world_size"] == 2
        assert row["progress/examples_seen"] == 4 * row["step"]  # summed over ranks
        for key in ("model_tokens", "env_tokens", "turns"):  # means over both ranks' rollouts
            mean = sum(t["behaviour"][key] for t in both) / len(both)
            assert row[f"behaviour/{key}"] == pytest.approx(mean), key
    assert (ddp / "final" / "merged" / "model.safetensors").exists()
    assert json.loads((ddp / "summary.json").read_text())["steps"] == 3

    # one process with the same global batch (2 x 2 accumulation) draws the same tasks at every step
    single = tmp_path / "single"
    cmd = [sys.executable, str(HERE / "grpo_driver.py"), *ARGS, f"--run.run_dir={single}"]
    run([*cmd, "--grpo.gradient_accumulation_steps=2"], tmp_path / "single.log")
    tasks = [
        Counter((t["step"], t["task_id"]) for t in ts)
        for ts in (rank0 + rank1, train_traces(single / "traces.jsonl"))
    ]
    assert tasks[0] == tasks[1]
    assert [r["progress/examples_seen"] for r in steps(single)] == [4, 8, 12]


def test_fsdp_follows_ddp_step_for_step(ddp, tmp_path):
    fsdp = tmp_path / "fsdp"
    script = [str(HERE / "cpu_fsdp.py"), str(HERE / "grpo_driver.py"), *ARGS, f"--run.run_dir={fsdp}"]
    run(launch("fsdp.yaml", *script), tmp_path / "fsdp.log")
    a, b = steps(ddp), steps(fsdp)
    for ra, rb in zip(a, b, strict=True):
        assert ra["reward"] == pytest.approx(rb["reward"], abs=1e-6)  # the same samples on every rank
        assert ra["grad_norm"] == pytest.approx(rb["grad_norm"], rel=1e-3)
    # FSDP it was: sharded checkpoints (torch.distributed.checkpoint), one shard file per rank
    assert sorted(p.name for p in (fsdp / "checkpoint-3" / "pytorch_model_fsdp_0").glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    # the exported adapter is the whole (gathered) adapter, equal to DDP's
    wa = load_file(ddp / "final" / "adapter" / "adapter_model.safetensors")
    wb = load_file(fsdp / "final" / "adapter" / "adapter_model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-3, atol=1e-5)
    assert (fsdp / "final" / "merged" / "model.safetensors").exists()


@pytest.mark.parametrize("target", ["rank", "launcher"])
def test_rank_death_leaves_nothing_running(target, tmp_path):
    args = [*ARGS, "--grpo.max_steps=50", f"--run.run_dir={tmp_path / 'run'}"]
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "rank_death.py"),
        "--target",
        target,
        "--log",
        str(tmp_path / "log"),
    ]
    done = subprocess.run(
        [*cmd, "--", *launch("ddp.yaml", str(HERE / "grpo_driver.py"), *args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + (tmp_path / "log").read_text()[-2000:]
    assert f"PASS: rank death (--target {target})" in done.stdout
    assert "left after the kill: 0 running" in done.stdout
