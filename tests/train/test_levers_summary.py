"""``bench/gpu_rollouts.py levers``: the GPU speed-lever runs side by side, from their metrics and logs.

Run as the GPU stage runs it (a subprocess over run folders), on metrics written by FATHOM's own writer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fathom.train.runlog import JsonlWriter

BENCH = Path(__file__).parents[2] / "bench" / "gpu_rollouts.py"


def write_run(root: Path, name: str, steps: list[tuple[float, float, float]], log: str) -> None:
    writer = JsonlWriter(root / name / "metrics.jsonl", enabled=True)
    for i, (step_s, gen_s, tok_s) in enumerate(steps, start=1):
        writer.write({"step": i, "time/step_s": step_s, "time/generate_s": gen_s, "time/env_s": 0.5,
                      "time/optimise_s": step_s - gen_s - 0.5, "throughput/generate_tokens_per_s": tok_s,
                      "sampling/sampling_logp_difference/mean": 0.02,
                      "sampling/sampling_logp_difference/max": 1.5})  # fmt: skip
    writer.close()
    (root / f"{name}.log").write_text(log)


def test_pairs_are_compared_without_the_warm_up_step(tmp_path):
    base_log = (
        "+ fathom grpo --rollout.vllm_max_num_batched_tokens=16384\n"  # the command, not the engine: skipped
        "INFO Chunked prefill is enabled with max_num_batched_tokens=4096.\nAsynchronous scheduling is enabled.\n"
    )
    write_run(tmp_path, "base64", [(30.0, 20.0, 1000.0), (12.0, 8.0, 6000.0), (10.0, 6.0, 8000.0)], base_log)
    write_run(
        tmp_path,
        "levers64",
        [(25.0, 15.0, 1000.0), (6.0, 4.0, 12000.0)],
        "+ fathom grpo --rollout.vllm_max_num_batched_tokens=16384\n",  # vLLM said nothing: not read as its word
    )
    out = tmp_path / "levers.json"
    cmd = [
        sys.executable,
        str(BENCH),
        "levers",
        "--runs",
        str(tmp_path),
        "--lever-args",
        "X",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = json.loads(out.read_text())
    pair = result["levers"]["64"]
    assert [s["step_s"] for s in pair["base64"]["steps"]] == [12.0, 10.0]  # step 1 (warm-up) left out
    assert pair["base64"]["step_s"] == 11.0 and pair["levers64"]["step_s"] == 6.0
    assert pair["speedup"]["step_s"] == round(11.0 / 6.0, 3)
    assert pair["speedup"]["sampled_tok_s"] == round(12000.0 / 7000.0, 3)
    assert pair["base64"]["engine"] == {"async_scheduling": "enabled", "max_num_batched_tokens": 4096}
    assert pair["levers64"]["engine"] == {"async_scheduling": None, "max_num_batched_tokens": None}
    assert pair["levers64"]["logp_diff_mean"] == 0.02 and "256" not in result["levers"]
    assert result["lever_args"] == "X" and result["command"].startswith("python bench/gpu_rollouts.py levers")


def test_a_run_without_a_measured_step_fails_loudly(tmp_path):
    write_run(tmp_path, "base64", [(30.0, 20.0, 1000.0)], "")
    write_run(tmp_path, "levers64", [(25.0, 15.0, 1000.0)], "")
    cmd = [sys.executable, str(BENCH), "levers", "--runs", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode != 0 and "GRPO_STEPS >= 2" in done.stderr
