"""Read what a run directory holds: training metrics (``metrics.jsonl``) and eval results (``eval.jsonl``).

- `load_metrics(path)`: one dict per logged step, numbers only, sorted by step. Lines logged twice for a
  step (a resumed run repeats steps) are merged, later values winning; bad JSON lines are skipped, because
  a run killed mid-write leaves a partial last line and a report should still come out.
- `find_evals(run_dir)`: every directory under `run_dir` (itself included) holding an ``eval.jsonl``, with
  its label, policy, context window and rows; the groups are recomputed from the rows, so an eval that is
  still running or was interrupted is reported as far as it got.

This module reads files only; plotting is `fathom.report.plots`, the page `fathom.report.html`.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fathom.eval.runner import CONFIG_FILE, EVAL_FILE, SUMMARY_FILE, read_rows
from fathom.eval.stats import summarize

STEP_KEYS = ("step", "global_step")
POLICY_ORDER = {"direct": 0, "rlm": 1, "expert": 2}  # baselines first, the expert (upper bound) last


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def load_metrics(path: str | Path) -> list[dict[str, float]]:
    """Numeric metrics per step from a JSONL log; [] when the file is missing."""
    path = Path(path)
    if not path.exists():
        return []
    by_step: dict[float, dict[str, float]] = {}
    for index, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        numbers = {k: v for k, v in ((k, _number(v)) for k, v in obj.items()) if v is not None}
        step = next((numbers[k] for k in STEP_KEYS if k in numbers), float(index))
        by_step.setdefault(step, {}).update(numbers, step=step)
    return [by_step[s] for s in sorted(by_step)]


@dataclass(frozen=True)
class EvalResult:
    label: str
    policy: str
    directory: Path
    config: dict[str, Any]
    rows: list[dict[str, Any]]
    groups: dict[str, dict[str, float]]

    @property
    def context_tokens(self) -> int | None:
        value = self.config.get("context_tokens")
        return int(value) if value else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        obj = json.loads(path.read_text())
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _walk(root: Path) -> list[Path]:
    """Directories under `root` holding an eval file, following symlinks (baselines linked into a run's
    folder count) but never entering one real directory twice."""
    found, seen = [], set()
    for folder, subdirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        subdirs.sort()
        if EVAL_FILE in files:
            found.append(Path(folder))
    return found


def find_evals(run_dir: str | Path) -> list[EvalResult]:
    """Eval results under `run_dir`, ordered direct, rlm, expert, then by label; labels made unique."""
    run_dir = Path(run_dir)
    results = []
    for directory in _walk(run_dir):
        eval_file = directory / EVAL_FILE
        config = {**_read_json(directory / SUMMARY_FILE), **_read_json(directory / CONFIG_FILE)}
        config.pop("groups", None)
        by_id: dict[str, dict[str, Any]] = {}
        for row in read_rows(eval_file):
            by_id.setdefault(row["id"], row)
        rows = list(by_id.values())
        if not rows:
            continue
        policy = str(config.get("policy") or rows[0].get("policy", directory.name)).split(":")[0]
        label = str(config.get("label") or rows[0].get("policy") or directory.name)
        results.append(EvalResult(label, policy, directory, config, rows, summarize(rows)))
    seen: dict[str, int] = {}
    for r in results:
        seen[r.label] = seen.get(r.label, 0) + 1
    results = [
        r if seen[r.label] == 1 else replace(r, label=f"{r.label} ({r.directory.name})") for r in results
    ]
    return sorted(results, key=lambda r: (POLICY_ORDER.get(r.policy, 1), r.label))
