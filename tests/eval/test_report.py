"""`fathom report`: PNGs and a self-contained HTML page from a synthetic metrics log and real eval output."""

from __future__ import annotations

import base64
import json
import math
import random
import re
from pathlib import Path

import pytest
from matplotlib.image import imread

from fathom.cli import main
from fathom.eval import run_eval
from fathom.eval.policies import DirectPolicy, ExpertPolicy
from fathom.report.cli import build_report
from fathom.report.runs import find_evals, load_metrics
from fathom.rollout import Sampling
from fathom.tasks import load_tasks

PNG = b"\x89PNG\r\n\x1a\n"
TRAINING = {"summary", "reward", "accuracy", "kl_entropy", "grad_norm", "completion_length",
            "turns_subcalls", "reward_components", "curriculum", "step_time"}  # fmt: skip
EVAL = {"accuracy_vs_length", "accuracy_by_family", "cost_vs_length"}


def write_metrics(path: Path, steps: int = 60, drop: tuple[str, ...] = ()) -> None:
    rng = random.Random(0)
    lines = []
    for step in range(1, steps + 1):
        acc = min(1.0, step / steps + rng.gauss(0, 0.05))
        row = {
            "step": step, "reward": acc + 0.1, "reward/format": 0.1, "reward/correctness": 0.7 * acc,
            "reward/token_budget": 0.1 * acc, "reward/recursion": 0.1 * acc, "accuracy": acc,
            "kl": 0.01 * math.sqrt(step), "entropy": math.exp(-step / 40), "grad_norm": abs(rng.gauss(1, 0.2)),
            "completion_length": 200 + step, "turns": 2 + step / 30, "llm_calls": step / 20,
            "tier": step // 20, "penalty_weight": 0.1 + step / 600, "lr": 1e-5, "phase": "train",
            "time/generate_s": 2.0, "time/env_s": 0.5, "time/optimise_s": 1.0 + rng.random(),
        }  # fmt: skip
        lines.append(json.dumps({k: v for k, v in row.items() if k not in drop}))
    lines.insert(10, "not json at all")
    lines.append(json.dumps({"step": 30, "eval/accuracy": 0.5}))  # logged again for a step: merged
    path.write_text("\n".join(lines) + '\n{"step": 61, "rew')  # the run died mid-line


@pytest.fixture(scope="module")
def eval_run(heldout_file, tmp_path_factory) -> Path:
    """A run directory holding real eval results of the expert and the tiny model's direct baseline."""
    run = tmp_path_factory.mktemp("run")
    tasks = load_tasks(heldout_file)
    run_eval(ExpertPolicy(), tasks, run / "eval" / "expert", batch_size=21, progress=False)
    direct = DirectPolicy("tiny-smol", sampling=Sampling(max_new_tokens=2, temperature=0.0), device="cpu")
    run_eval(direct, tasks[::2], run / "eval" / "direct", batch_size=11, progress=False)
    return run


def check_outputs(page: Path, plots: list[Path], expected: set[str]) -> str:
    assert {p.stem for p in plots} == expected
    html = page.read_text()
    for plot in plots:
        data = plot.read_bytes()
        assert data.startswith(PNG) and plot.parent == page.parent
        height, width, _ = imread(plot).shape
        assert width >= 400 and height >= 250
        assert base64.b64encode(data).decode() in html  # embedded, not linked
        assert f'id="{plot.stem}"' in html
    assert len(re.findall(r'src="data:image/png;base64,', html)) == len(plots)
    assert 'src="http' not in html and "<link" not in html  # self-contained
    return html


def test_report_from_metrics_and_evals(eval_run, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval").symlink_to(eval_run / "eval", target_is_directory=True)
    write_metrics(run / "metrics.jsonl")
    (run / "config.json").write_text('{"model": "tiny-smol"}')
    assert main(["report", str(run)]) == 0
    plots = sorted((run / "report").glob("*.png"))
    html = check_outputs(run / "report" / "report.html", plots, TRAINING | EVAL | {"other_metrics"})
    assert "direct:tiny-smol" in html and "expert" in html and "2,048" in html
    assert "100.0% [85%–100%] n=21" in html  # the expert's row: accuracy with its Wilson interval
    assert "tiny-smol" in html and "config.json" in html
    assert "60 logged steps" in html


def test_missing_keys_are_skipped(tmp_path):
    dropped = ("kl", "entropy", "tier", "penalty_weight", "lr", "phase", "time/env_s", "time/generate_s")
    write_metrics(tmp_path / "metrics.jsonl", drop=dropped)
    page, plots = build_report(tmp_path)
    check_outputs(page, plots, TRAINING - {"kl_entropy", "curriculum"})  # one timing key is enough
    assert "Evaluation" not in page.read_text()


def test_eval_only_directory(eval_run, tmp_path):
    page, plots = build_report(eval_run, tmp_path / "out")
    html = check_outputs(page, plots, EVAL)
    assert "Training" not in html and "Accuracy by document length" in html


def test_empty_directory_says_so(tmp_path):
    page, plots = build_report(tmp_path)
    assert plots == [] and "No metrics.jsonl and no eval results" in page.read_text()


def test_metrics_loading_merges_and_skips_bad_lines(tmp_path):
    write_metrics(tmp_path / "metrics.jsonl", steps=40)
    metrics = load_metrics(tmp_path / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 41))
    assert metrics[29]["eval/accuracy"] == 0.5 and "reward" in metrics[29]  # merged, not replaced
    assert all("phase" not in m for m in metrics)  # strings are not metrics


def test_find_evals_orders_and_summarises(eval_run):
    evals = find_evals(eval_run)
    assert [e.label for e in evals] == ["direct:tiny-smol", "expert"]
    direct, expert = evals
    assert direct.context_tokens == 2048 and expert.context_tokens is None
    assert direct.groups["all"]["n"] == 11 and expert.groups["all"]["accuracy"] >= 0.95
