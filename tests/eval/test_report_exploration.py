"""`fathom report`'s GRPO exploration figures from a synthetic metrics.jsonl: the series they plot and the PNGs."""

from __future__ import annotations

import json
from pathlib import Path

from matplotlib.image import imread

from fathom.report.cli import build_report
from fathom.report.exploration import claimed, exploration_series
from fathom.report.runs import load_metrics

PNG = b"\x89PNG\r\n\x1a\n"
FIGURES = {"zero_std", "clip_ratio", "train_accuracy_by_tier", "train_accuracy_by_family"}


def step_row(step: int) -> dict[str, float]:
    tier = "8k-easy" if step <= 3 else "16k-mixed"  # the curriculum advances after step 3
    row = {
        "step": step,
        "entropy": 2.0 - step / 10,
        "kl": step / 100,
        "frac_reward_zero_std": 0.5 - step / 20,
        "dynamic/zero_std_sampled": 0.75 - step / 20,
        "dynamic/zero_std_kept": 0.25 - step / 40,
        "clip_ratio/low_mean": step / 1000,
        "clip_ratio/high_mean": 2 * step / 1000,
        "clip_ratio/region_mean": 3 * step / 1000,
        "reward/format": 0.1,
        f"accuracy/tier/{tier}": step / 10,
        "accuracy/family/niah": step / 8,
    }
    if step % 2 == 0:  # a family only some steps drew
        row["accuracy/family/keychain"] = step / 20
    return row


def write(path: Path, steps: int = 6) -> None:
    path.write_text("\n".join(json.dumps(step_row(s)) for s in range(1, steps + 1)) + "\n")


def test_exploration_series_are_the_logged_values(tmp_path):
    write(tmp_path / "metrics.jsonl")
    metrics = load_metrics(tmp_path / "metrics.jsonl")
    series = exploration_series(metrics)
    assert set(series) == FIGURES
    title, zero = series["zero_std"]
    assert title == "groups with zero reward std"
    assert zero["trained batch (TRL)"] == ([1, 2, 3, 4, 5, 6], [0.5 - s / 20 for s in range(1, 7)])
    assert zero["sampled, before dynamic sampling"][1] == [0.75 - s / 20 for s in range(1, 7)]
    assert zero["kept, after dynamic sampling"][1] == [0.25 - s / 40 for s in range(1, 7)]
    clip = series["clip_ratio"][1]
    assert list(clip) == ["either side", "low (ratio < 1 - epsilon)", "high (ratio > 1 + epsilon_high)"]
    assert clip["high (ratio > 1 + epsilon_high)"][1] == [2 * s / 1000 for s in range(1, 7)]
    tiers = series["train_accuracy_by_tier"][1]
    assert tiers == {"16k-mixed": ([4, 5, 6], [0.4, 0.5, 0.6]), "8k-easy": ([1, 2, 3], [0.1, 0.2, 0.3])}
    families = series["train_accuracy_by_family"][1]
    assert families["keychain"] == ([2, 4, 6], [0.1, 0.2, 0.3])
    assert families["niah"][1] == [s / 8 for s in range(1, 7)]
    assert "accuracy/family/niah" in claimed(metrics) and "entropy" not in claimed(metrics)


def test_report_writes_the_exploration_figures(tmp_path):
    write(tmp_path / "metrics.jsonl")
    _, plots = build_report(tmp_path)
    stems = {p.stem for p in plots}
    assert FIGURES | {"kl_entropy", "reward_components"} <= stems
    for plot in plots:
        if plot.stem in FIGURES:
            assert plot.read_bytes().startswith(PNG)
            height, width, _ = imread(plot).shape
            assert width >= 400 and height >= 250
    assert "other_metrics" not in stems  # every logged key has a figure: none lands in the catch-all


def test_figures_without_their_keys_are_not_written(tmp_path):
    rows = [{k: v for k, v in step_row(s).items() if not k.startswith(("dynamic/", "clip_ratio/", "accuracy/"))}
            for s in range(1, 4)]  # fmt: skip
    (tmp_path / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows)) + "\n")
    series = exploration_series(load_metrics(tmp_path / "metrics.jsonl"))
    assert set(series) == {"zero_std"} and list(series["zero_std"][1]) == ["trained batch (TRL)"]
    _, plots = build_report(tmp_path)
    assert {p.stem for p in plots} & FIGURES == {"zero_std"}
