"""The Task record and its JSONL file format: reading with line-precise errors, writing deterministically.

A task file is JSON Lines, one task object per line (blank lines are skipped). Keys:

=================  ========  =================================================================
key                required  value (default when left out)
=================  ========  =================================================================
id                 yes       non-empty string, unique within the file
question           yes       non-empty string
answer             yes       gold answer; its type must fit the metric (below)
document           one of    the document inline (string)
document_path      one of    path of a UTF-8 text file, relative to the task file's folder, inside it
family             no        non-empty string ("custom"; `fathom.tasks.FAMILIES` knows the built-ins)
metric             no        one of `fathom.reward.metrics.METRICS` ("exact")
length_tokens      no        int >= 0: the nominal length tier (estimated Qwen2.5 tokens of the document)
length_chars       no        int >= 0: characters in the document (counted)
difficulty         no        non-empty string ("easy", "medium", "hard" for built-ins; "unrated")
seed               no        int (0)
meta               no        object: free-form provenance (haystack source, variant, ...)
=================  ========  =================================================================

So a hand-written task needs four keys: ``{"id": "q1", "question": "...", "answer": "...", "document":
"..."}``. Computing a length left out of a ``document_path`` task reads that file once, at load time;
generated datasets write every key, so loading them reads no document. `POST /reset` parses its ``task``
with `task_from_dict` too, so the same defaults hold there. Unknown keys are rejected, so a misspelt key
never passes silently; anything extra belongs in ``meta``.
Answer types: ``exact`` takes a string or an int; ``numeric`` an int or float; ``set_f1`` a list of
strings/ints, or of 2-item lists of them (pairs).

Documents may be 100 MB: `Task.document_file()` gives the path without reading it (the sandbox binds the
file read-only), and `Task.read_document()` reads it only when asked.

This module does not generate or verify tasks against their documents (see the family modules).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from fathom.reward.metrics import METRICS
from fathom.tasks.haystack import estimate_tokens

Answer = str | int | float | list

REQUIRED = ("id", "question", "answer")
# Keys a hand-written task may leave out, with their defaults (the two lengths are computed instead).
DEFAULTS: dict[str, Any] = {"family": "custom", "metric": "exact", "difficulty": "unrated", "seed": 0}
COMPUTED = ("length_tokens", "length_chars")
OPTIONAL = ("family", "metric", "length_tokens", "length_chars", "difficulty", "seed")
KEYS = (
    "id",
    "family",
    "question",
    "answer",
    "metric",
    "length_tokens",
    "length_chars",
    "difficulty",
    "seed",
    "document",
    "document_path",
    "meta",
)


class TaskFileError(ValueError):
    """A task file has bad lines. `problems` lists (line number, reason) for every one of them."""

    def __init__(self, path: str | Path, problems: list[tuple[int, str]]):
        self.path = Path(path)
        self.problems = problems
        lines = "\n".join(f"{self.path}:{line}: {reason}" for line, reason in problems)
        super().__init__(f"{len(problems)} bad line(s) in {self.path}:\n{lines}")


@dataclass(frozen=True)
class Task:
    id: str
    family: str
    question: str
    answer: Answer
    metric: str
    length_tokens: int
    length_chars: int
    difficulty: str
    seed: int
    document: str | None = None
    document_path: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # Folder that `document_path` is relative to; set by the loader, never written to a file.
    base_dir: Path | None = field(default=None, compare=False, repr=False)

    def document_file(self, base_dir: str | Path | None = None) -> Path | None:
        """Absolute path of the document file, or None when the document is inline. Reads nothing."""
        if self.document_path is None:
            return None
        root = Path(base_dir) if base_dir is not None else self.base_dir
        if root is None:
            raise ValueError(f"task {self.id}: document_path is relative and no base_dir is known")
        return (root / self.document_path).resolve()

    def read_document(self, base_dir: str | Path | None = None) -> str:
        if self.document is not None:
            return self.document
        return self.document_file(base_dir).read_text(encoding="utf-8")  # type: ignore[union-attr]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object for a task file: `base_dir` dropped, and the unused document key left out."""
        out = {k: v for k, v in asdict(self).items() if k in KEYS}
        out.pop("document" if self.document is None else "document_path")
        if not self.meta:
            out.pop("meta")
        return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, str) or _is_int(value)


def answer_problem(metric: str, answer: Any) -> str | None:
    """Why `answer` cannot be a gold answer for `metric`, or None if it can."""
    if metric == "exact":
        ok = (isinstance(answer, str) and answer.strip() != "") or _is_int(answer)
        return None if ok else "metric 'exact' needs a non-empty string or an int answer"
    if metric == "numeric":
        ok = (_is_int(answer) or isinstance(answer, float)) and math.isfinite(answer)
        return None if ok else "metric 'numeric' needs an int or float answer"
    if metric == "set_f1":
        if not isinstance(answer, list):
            return "metric 'set_f1' needs a list answer"
        if all(_is_scalar(x) for x in answer):
            return None
        if all(isinstance(x, list) and len(x) == 2 and all(_is_scalar(y) for y in x) for x in answer):
            return None
        return "metric 'set_f1' needs a list of strings/ints, or of 2-item lists of them (pairs)"
    return f"unknown metric {metric!r}; known: {', '.join(METRICS)}"


def _safe_relative(path: str) -> bool:
    pure = PurePosixPath(path)
    return path != "" and not pure.is_absolute() and ".." not in pure.parts and "\\" not in path


def task_from_dict(obj: Any, base_dir: Path | None = None) -> Task:
    """Check one parsed JSON value against the schema and build the Task; raises ValueError(reason)."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in REQUIRED if k not in obj]
    if missing:
        raise ValueError(f"missing key(s): {', '.join(missing)}")
    unknown = sorted(set(obj) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown key(s): {', '.join(unknown)} (put extra data under 'meta')")
    obj = {**DEFAULTS, **obj}
    for key in ("id", "family", "question", "difficulty"):
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise ValueError(f"{key!r} must be a non-empty string")
    for key in ("length_tokens", "length_chars", "seed"):
        if key not in obj:
            continue
        if not _is_int(obj[key]) or (key != "seed" and obj[key] < 0):
            raise ValueError(f"{key!r} must be an int" + (" >= 0" if key != "seed" else ""))
    if obj["metric"] not in METRICS:
        raise ValueError(f"unknown metric {obj['metric']!r}; known: {', '.join(METRICS)}")
    problem = answer_problem(obj["metric"], obj["answer"])
    if problem:
        hint = ' (a list answer needs "metric": "set_f1")' if isinstance(obj["answer"], list) else ""
        raise ValueError(f"bad answer {obj['answer']!r}: {problem}{hint}")
    has_doc, has_path = obj.get("document") is not None, obj.get("document_path") is not None
    if has_doc == has_path:
        raise ValueError("exactly one of 'document' and 'document_path' must be given")
    if has_doc and not isinstance(obj["document"], str):
        raise ValueError("'document' must be a string")
    if has_path:
        path = obj["document_path"]
        if not isinstance(path, str) or not _safe_relative(path):
            raise ValueError(
                f"'document_path' must be a relative path inside the task file's folder: {path!r}"
            )
        if base_dir is not None and not (base_dir / path).is_file():
            raise ValueError(f"document file not found: {base_dir / path}")
    if not isinstance(obj.get("meta", {}), dict):
        raise ValueError("'meta' must be an object")
    if any(k not in obj for k in COMPUTED):
        obj = {**obj, **_lengths(obj, base_dir)}
    return Task(**{k: obj[k] for k in KEYS if k in obj}, base_dir=base_dir if has_path else None)


def _lengths(obj: dict[str, Any], base_dir: Path | None) -> dict[str, int]:
    """The lengths a task left out, counted from its document (read once for a document_path)."""
    if obj.get("document") is not None:
        text = obj["document"]
    elif base_dir is not None:
        text = (base_dir / obj["document_path"]).read_text(encoding="utf-8")
    else:
        raise ValueError("a task with a relative document_path and no folder must give its lengths")
    return {
        "length_chars": obj.get("length_chars", len(text)),
        "length_tokens": obj.get("length_tokens", estimate_tokens(text)),
    }


def read_task_file(path: str | Path) -> tuple[list[Task], list[tuple[int, str]]]:
    """All good tasks and all (line number, reason) problems of a task file; never raises for bad lines."""
    path = Path(path)
    base_dir = path.resolve().parent
    tasks: list[Task] = []
    problems: list[tuple[int, str]] = []
    seen: dict[str, int] = {}
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                task = task_from_dict(json.loads(line), base_dir)
            except ValueError as e:  # json.JSONDecodeError is a ValueError too
                reason = f"bad JSON: {e}" if isinstance(e, json.JSONDecodeError) else str(e)
                problems.append((number, reason))
                continue
            if task.id in seen:
                problems.append((number, f"duplicate id {task.id!r} (first on line {seen[task.id]})"))
                continue
            seen[task.id] = number
            tasks.append(task)
    return tasks, problems


def load_tasks(path: str | Path) -> list[Task]:
    """Read a task file; raises `TaskFileError` naming every bad line (file, line number, reason)."""
    tasks, problems = read_task_file(path)
    if problems:
        raise TaskFileError(path, problems)
    return tasks


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def write_tasks(
    path: str | Path, tasks: Iterable[Task], docs_dir: str | None = "docs", inline_max_chars: int = 0
) -> list[Task]:
    """Write tasks as JSONL; return them as written (with `document_path` and `base_dir` set).

    Inline documents longer than `inline_max_chars` go to ``<folder of path>/<docs_dir>/<id>.txt``
    (`docs_dir=None` keeps every document inline). A task that already points at a file keeps it when
    the file is where this file would put it; otherwise the file is copied there. Output is a pure
    function of the tasks, so the same tasks give byte-identical files.
    """
    path = Path(path)
    base_dir = path.resolve().parent
    written: list[Task] = []
    lines: list[str] = []
    files: set[str] = set()
    for task in tasks:
        if docs_dir is not None and (
            task.document_path is not None or len(task.document or "") > inline_max_chars
        ):
            rel = f"{docs_dir}/{_UNSAFE.sub('_', task.id)}.txt"
            if rel in files:
                raise ValueError(
                    f"two tasks would share the document file {rel} (ids too alike: {task.id!r})"
                )
            files.add(rel)
            target = base_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if task.document is not None:
                _write_text(target, task.document)
            elif task.document_file() != target.resolve():
                shutil.copyfile(task.document_file(), target)  # type: ignore[arg-type]
            task = replace(task, document=None, document_path=rel, base_dir=base_dir)
        elif task.document is None:
            task = replace(task, document=task.read_document(), document_path=None, base_dir=None)
        written.append(task)
        lines.append(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
    _write_text(path, "".join(lines))
    return written


def _write_text(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(partial, path)
