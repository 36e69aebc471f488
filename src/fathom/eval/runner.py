"""The eval loop: run a policy over a task file in batches, append each row to ``eval.jsonl`` as it lands,
and write ``summary.json``; an interrupted eval resumes where it stopped.

Files in the output directory:

- ``eval_config.json``: what the results belong to (policy, model, context window, task file). A rerun into
  the same directory with a different policy or model is refused rather than mixed in.
- ``eval.jsonl``: one row per task (fields in `fathom.eval.policies`), appended and flushed to disk batch by
  batch, so a kill loses at most the batch in flight. On restart, ids already there are skipped; a last line
  cut off mid-write is dropped first.
- ``traces.jsonl``: ``{"id", "trace"}`` per task for policies in the scaffold (every turn's text, cells and
  sub-calls), kept apart so that eval.jsonl stays small; written before the rows of the same batch.
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
TRACES_FILE = "traces.jsonl"


class EvalConfigMismatch(RuntimeError):
    """The output directory holds results of a different policy or model."""


def drop_partial_line(path: Path, block: int = 1 << 16) -> None:
    """Cut a last line left without its newline by a kill mid-write, so appending starts on a fresh line."""
    if not path.exists():
        return
    with path.open("r+b") as f:
        end = f.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:  # scan back block by block to the last newline
            start = max(0, pos - block)
            f.seek(start)
            newline = f.read(pos - start).rfind(b"\n")
            if newline >= 0:
                pos = start + newline + 1
                break
            pos = start
        if pos < end:
            f.truncate(pos)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows of an eval file (a partial last line is ignored)."""
    if not path.exists():
        return []
    text = path.read_bytes().decode("utf-8")
    lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def _write_json(path: Path, obj: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    os.replace(partial, path)


def _append(path: Path, objects: list[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(o, default=str) + "\n" for o in objects))
        f.flush()
        os.fsync(f.fileno())  # what is in the file survives a kill or a power cut


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
        for name in (EVAL_FILE, SUMMARY_FILE, TRACES_FILE):
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
    for path in (eval_path, out / TRACES_FILE):
        drop_partial_line(path)
    done = {row["id"] for row in read_rows(eval_path)}
    todo = [t for t in tasks if t.id not in done]
    started = time.perf_counter()
    bar = tqdm(
        total=len(tasks), initial=len(tasks) - len(todo), desc=policy.label, unit="task", disable=not progress
    )
    try:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            rows = policy.run(batch)
            traces = [{"id": r["id"], "trace": r.pop("trace")} for r in rows if "trace" in r]
            if traces:
                _append(out / TRACES_FILE, traces)
            _append(eval_path, [{**r, "policy": policy.label} for r in rows])
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
