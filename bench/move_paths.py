"""Which move a student played where the teacher would have played another, on the same tasks.

    PYTHONPATH=src python bench/move_paths.py TRACES EVAL TASKS [--max-turns 10] [--json OUT]

TRACES: a GPU proof's sampled episodes (``keep/eval_<name>_traces_sample.jsonl``); EVAL: the same
evaluation's rows (``keep/eval_<name>_eval.jsonl``, for whether each was right); TASKS: the held-out file they
came from (rebuilt here with the run's `fathom data build` command: same seed, same sha256). Plays the
scripted teacher (`fathom.policies.teacher`, its own reader) through the real rollout engine on the sampled
tasks, names each turn of both by its move (`move_of`: look, search, table, records, follow, cut, read,
answer), and prints per task both paths and the first turn where they part, then how often each turn was the
first.

A move name is read off the turn's code by a few markers that the teacher's cells carry; a student's cell
that writes a move its own way is named ``other``. The student's later turns answer its own reader, whose
replies differ from the teacher's reader's, so a parting after a `read` may be the reader's doing rather
than the student's choice; a parting at the third turn (follow or cut, right after the search) is the
student's choice alone.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from fathom.models import ModelSpec, load_tokenizer
from fathom.policies.teacher import play_teacher
from fathom.rollout import ChatFormat
from fathom.tasks import load_tasks


def move_of(text: str) -> str:
    """The teacher's move a turn plays, by the markers in its code (see the module docstring)."""
    code = text.split("```repl", 1)[-1]
    markers = (
        ("table", ("csv", "DictReader")),
        ("records", ("json.loads",)),
        ("follow", ("todo",)),
        ("read", ("llm(", "llm_batch")),
        ("answer", ("FINAL(",)),
        ("search", ("hits",)),
        ("look", ("--- head ---", "lines[at]")),
        ("cut", ("kept", "keep")),
    )
    return next((name for name, marks in markers if any(m in code for m in marks)), "other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces")
    parser.add_argument("eval_rows")
    parser.add_argument("tasks")
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--json", help="write the per-task paths here")
    args = parser.parse_args()
    student = {}
    with open(args.traces) as f:
        for line in f:
            trace = json.loads(line)["trace"]
            student[trace["task_id"]] = [move_of(t["text"]) for t in trace["turns"]]
    with open(args.eval_rows) as f:
        right = {row["id"]: bool(row["correct"]) for row in map(json.loads, f)}
    tasks = [t for t in load_tasks(args.tasks) if t.id in student]
    missing = set(student) - {t.id for t in tasks}
    if missing:
        raise SystemExit(f"{len(missing)} sampled tasks are not in {args.tasks}: not the run's held-out file")
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))
    episodes = play_teacher(chat, tasks, args.max_turns)
    rows, first = [], Counter()
    for task, episode in zip(tasks, episodes, strict=True):
        teacher, own = [move_of(t.text) for t in episode.turns], student[task.id]
        parts = next((i for i, (a, b) in enumerate(zip(teacher, own, strict=False)) if a != b), None)
        if parts is None and len(teacher) != len(own):
            parts = min(len(teacher), len(own))
        first[parts] += 1
        rows.append(
            {
                "task": task.id,
                "teacher": teacher,
                "teacher_correct": episode.correct,
                "student": own,
                "student_correct": right[task.id],
                "first_parting_turn": parts,
            }
        )
        print(
            f"{task.id}  parts at {parts}\n  teacher {'right' if episode.correct else 'wrong'}: {' '.join(teacher)}"
            f"\n  student {'right' if right[task.id] else 'wrong'}: {' '.join(own)}"
        )
    summary = {
        "tasks": len(rows),
        "teacher_correct": sum(r["teacher_correct"] for r in rows),
        "student_correct": sum(r["student_correct"] for r in rows),
        "first_parting_turn": {
            str(k): v for k, v in sorted(first.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
        },
    }
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "tasks": rows}, f, indent=1)


if __name__ == "__main__":
    main()
