"""Episode traces for the web viewer: find ``traces*.jsonl`` files under a runs folder, page through their
lines, and turn any line into the one view the page renders (live episodes stream the same view).

Trace line format (one JSON object per line). The episode itself is `fathom.rollout.episode.Episode.to_json()`
(its ``reward`` is the breakdown; ``depth`` and ``engine_subcalls`` are not shown)::

    {"task_id": str, "system": str, "first": str,
     "turns": [{"text": str,                    # the model's turn, raw
                "observation": str,             # what the environment replied (the next user turn)
                "cells": [{"code", "stdout", "error", "truncated_chars", "elapsed_s",
                           "timed_out", "restarted"}, ...],
                "subcalls": [{"prompt", "chunk_chars", "reply", "depth", "elapsed_s"}, ...],
                "answer": any, "end_reason": str | null,
                "tokens": int, "finished": bool, "generate_s": float, "env_s": float}, ...]}

A line is either that object, with the outcome keys beside it, or a record holding it under ``"episode"``
(what `fathom.train` writes) or ``"trace"`` (what `fathom eval` writes). Outcome keys, all optional: ``reward`` (or ``env_reward``),
``breakdown`` (`RewardBreakdown.to_dict()`: total, score, correct, capped, components), ``end_reason``,
``answer``, ``gold``, ``question``, ``family``, ``length_tokens``, ``task_id`` (or ``id``); ``kind``,
``step``, ``group``, ``index``, ``tier`` and ``policy`` are shown as labels. A turn that failed holds
only ``text`` and ``error``. `fathom eval` writes ``{"id", "trace"}`` and keeps the outcome in
``eval.jsonl`` beside it; the viewer joins the two by id.

File access: only ``traces*.jsonl`` files found under the configured root (symlinks resolved, no path
leaving it) can be read. This module does not serve HTTP (demo.py) or run episodes (demo_runs.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

TRACE_GLOB = "traces*.jsonl"
EVAL_ROWS = "eval.jsonl"  # `fathom eval` keeps each trace's outcome here, by id
MAX_DEPTH = 4  # runs/<run>/<sub>/traces.jsonl at most: a runs folder is not a whole disk
LABEL_KEYS = ("kind", "step", "group", "index", "tier", "policy")


class TraceNotFound(LookupError):
    """No such trace file under the root, or no such line in it."""


class TraceFormatError(ValueError):
    """A trace line that is not JSON or holds no ``turns`` list."""


def find_trace_files(root: Path) -> list[dict[str, Any]]:
    """Every trace file under `root` (or `root` itself if it is one): path relative to root, size, lines."""
    root = root.resolve()
    if root.is_file():
        return [_describe(root, root.parent)]
    found = []
    for folder, dirs, files in os.walk(root):  # symlinked folders are listed in `dirs`, never entered
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")) if depth < MAX_DEPTH else []
        paths = [Path(folder) / f for f in sorted(files) if Path(f).match(TRACE_GLOB)]
        # A symlink out of the root (or to nothing) is not one of its files: neither listed nor read.
        found += [_describe(p, root) for p in paths if p.is_file() and p.resolve().is_relative_to(root)]
    return found


def _describe(path: Path, root: Path) -> dict[str, Any]:
    stat = path.stat()
    return {
        "file": path.relative_to(root).as_posix(),
        "run": path.parent.relative_to(root).as_posix() if path.parent != root else ".",
        "bytes": stat.st_size,
        "modified": stat.st_mtime,
        "lines": _count_lines(path),
    }


def _count_lines(path: Path) -> int:
    count, last = 0, b"\n"
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")  # a last line without its newline (a run still writing) counts too


def resolve_trace_file(root: Path, name: str) -> Path:
    """The trace file `name` (relative to `root`), refusing anything that is not one of its trace files."""
    root = root.resolve()
    base = root.parent if root.is_file() else root
    missing = TraceNotFound(f"no trace file {name[:200]!r} under the runs folder")
    try:
        path = (base / name).resolve()
        inside = path == root if root.is_file() else path.is_relative_to(root)
        found = inside and path.is_file() and path.match(TRACE_GLOB)
    except (ValueError, OSError) as exc:  # a NUL byte, a name or path too long for the file system
        raise missing from exc
    if not found:
        raise missing
    return path


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8", errors="replace") as f:
        yield from f


def _parse(line: str, number: int) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"line {number}: not JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise TraceFormatError(f"line {number}: expected a JSON object")
    return record


def _eval_outcomes(path: Path) -> dict[str, dict[str, Any]]:
    """`fathom eval`'s rows beside a trace file, by task id ({} when there are none)."""
    rows = path.parent / EVAL_ROWS
    outcomes: dict[str, dict[str, Any]] = {}
    if not rows.is_file():
        return outcomes
    for line in _lines(rows):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a run still writing leaves a partial last line
            continue
        if isinstance(row, dict) and "id" in row:
            outcomes[row["id"]] = row
    return outcomes


def _joined(record: dict[str, Any], outcomes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """An eval trace line ``{"id", "trace"}`` with its outcome from eval.jsonl beside it."""
    row = outcomes.get(record.get("id"))
    if row is None or "breakdown" in record or "trace" not in record:
        return record
    return {**row, "trace": record["trace"]}


def summaries(path: Path, offset: int = 0, limit: int = 50) -> list[dict[str, Any]]:
    """One row per line in [offset, offset + limit): what the file browser lists."""
    outcomes = _eval_outcomes(path)
    rows = []
    for number, line in islice(enumerate(_lines(path)), offset, offset + limit):
        if not line.strip():
            continue
        try:
            view = trace_view(_joined(_parse(line, number), outcomes))
        except TraceFormatError as exc:  # a bad line is listed as such; the others stay browsable
            rows.append({"line": number, "problem": str(exc)})
            continue
        breakdown = view["end"]["breakdown"] or {}
        rows.append(
            {
                "line": number,
                "task_id": view["task"]["task_id"],
                "family": view["task"]["family"],
                "turns": len(view["turns"]),
                "reward": view["end"]["reward"],
                "correct": breakdown.get("correct"),
                "end_reason": view["end"]["end_reason"],
                **view["labels"],
            }
        )
    return rows


def read_trace(path: Path, number: int) -> dict[str, Any]:
    """The view of line `number` (0-based) of a trace file."""
    line = next(islice(_lines(path), number, None), None) if number >= 0 else None
    if line is None or not line.strip():
        raise TraceNotFound(f"{path.name} has no trace on line {number}")
    return trace_view(_joined(_parse(line, number), _eval_outcomes(path)))


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def trace_view(record: dict[str, Any]) -> dict[str, Any]:
    """A trace line (see the module docstring) as the page renders it: task, start, turns, end, labels."""
    nested = next((record[k] for k in ("episode", "trace") if isinstance(record.get(k), dict)), None)
    trace = record if nested is None else nested
    turns = trace.get("turns")
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise TraceFormatError("a trace needs a 'turns' list of objects (see fathom.server.traces)")
    if isinstance(trace.get("reward"), dict):  # an Episode.to_json(): its reward is the whole breakdown
        trace = {**trace, "breakdown": trace["reward"], "reward": trace["reward"].get("total")}
    breakdown = _first(record.get("breakdown"), trace.get("breakdown"))
    breakdown = breakdown if isinstance(breakdown, dict) else None
    answered = [t["answer"] for t in turns if t.get("answer") is not None]
    last = turns[-1] if turns else {}
    return {
        "task": {
            "task_id": _first(record.get("task_id"), record.get("id"), trace.get("task_id")),
            "family": record.get("family"),
            "question": record.get("question"),
            "gold": record.get("gold"),
            "length_tokens": record.get("length_tokens"),
        },
        "start": {"system": trace.get("system"), "first": trace.get("first")},
        "turns": turns,
        "end": {
            "reward": _first(
                record.get("reward"),
                record.get("env_reward"),
                trace.get("reward"),
                (breakdown or {}).get("total"),
            ),
            "breakdown": breakdown,
            "end_reason": _first(
                record.get("end_reason"), trace.get("end_reason"), last.get("end_reason"), trace.get("error")
            ),
            "answer": record["answer"] if "answer" in record else (answered[-1] if answered else None),
        },
        "labels": {k: record[k] for k in LABEL_KEYS if k in record},
    }
