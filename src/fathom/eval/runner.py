"""The eval loop: run a policy over a task file in batches, append each row to ``eval.jsonl`` as it lands,
and write ``summary.json``; an interrupted eval resumes where it stopped.

Files in the output directory:

- ``eval_config.json``: what the results belong to (policy, model, context window, task file). A rerun into
  the same directory with a different policy or model is refused rather than mixed in.
- ``eval.jsonl``: one row per task (fields in `fathom.eval.policies`), appended and flushed to disk batch by
  batch, so a kill loses at most the batch in flight. On restart, ids already there are skipped; a last line
  cut off mid-write is dropped first.
- ``summary.json``: the policy's description, counts, total wall time, and `fathom.eval.stats.summarize`
  over the rows of this task file (``groups``), rewritten atomically at the end of every run.

This module does not build policies or print tables; see `fathom.eval.cli`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from fathom.eval.stats import summarize
from fathom.tasks import Task

if TYPE_CHECKING:
    from fathom.eval.policies import Policy

EVAL_FILE, SUMMARY_FILE, CONFIG_FILE = "eval.jsonl", "summary.json", "eval_config.json"


class EvalConfigMismatch(RuntimeError):
    """The output directory holds results of a different policy or model."""


def read_rows(path: Path, repair: bool = False) -> list[dict[str, Any]]:
    """The rows of an eval file. With `repair`, a trailing line cut off mid-write is removed from the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1  # everything after the last newline is a partial line
    if repair and cut < len(data):
        with path.open("r+b") as f:
            f.truncate(cut)
    return [json.loads(line) for line in data[:cut].decode("utf-8").splitlines() if line.strip()]


def _write_json(path: Path, obj: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(partial, path)


def _check_config(out: Path, config: dict[str, Any], overwrite: bool) -> None:
    path = out / CONFIG_FILE
    if path.exists() and not overwrite:
        old = json.loads(path.read_text())
        if old.get("policy") != config.get("policy") or old.get("model") != config.get("model"):
            raise EvalConfigMismatch(
                f"{out} holds results of policy={old.get('policy')} model={old.get('model')}; "
                f"this run is policy={config.get('policy')} model={config.get('model')}. "
                "Use another --out, or --overwrite to start over"
            )
    if overwrite:
        for name in (EVAL_FILE, SUMMARY_FILE):
            (out / name).unlink(missing_ok=True)
    _write_json(path, config)


def run_eval(
    policy: Policy,
    tasks: Sequence[Task],
    out: str | Path,
    batch_size: int = 8,
    task_file: str | None = None,
    progress: bool = True,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Evaluate `policy` on `tasks` into `out`, skipping tasks already done there; returns the summary."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = {**policy.describe(), "task_file": task_file}
    _check_config(out, config, overwrite)
    eval_path = out / EVAL_FILE
    done = {row["id"] for row in read_rows(eval_path, repair=True)}
    todo = [t for t in tasks if t.id not in done]
    started = time.perf_counter()
    bar = tqdm(
        total=len(tasks), initial=len(tasks) - len(todo), desc=policy.label, unit="task", disable=not progress
    )
    try:
        with eval_path.open("a", encoding="utf-8") as f:
            for start in range(0, len(todo), batch_size):
                batch = todo[start : start + batch_size]
                rows = policy.run(batch)
                f.write("".join(json.dumps({**r, "policy": policy.label}, default=str) + "\n" for r in rows))
                f.flush()
                os.fsync(f.fileno())  # what is in eval.jsonl survives a kill or a power cut
                bar.update(len(batch))
    finally:
        bar.close()
    wanted = {t.id for t in tasks}
    by_id: dict[str, dict[str, Any]] = {}
    for row in read_rows(eval_path):
        if row["id"] in wanted:
            by_id.setdefault(row["id"], row)
    rows = list(by_id.values())
    summary = {
        **config,
        "n_tasks": len(tasks),
        "n_rows": len(rows),
        "resumed_from": len(tasks) - len(todo),
        "wall_s_this_run": round(time.perf_counter() - started, 3),
        "groups": summarize(rows) if rows else {},
    }
    _write_json(out / SUMMARY_FILE, summary)
    return summary
