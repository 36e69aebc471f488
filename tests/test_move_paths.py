"""bench/move_paths.py: every teacher move is named by its code, and a student's path is compared with the
teacher's on the same task."""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from fathom.eval.policies import TeacherPolicy
from fathom.policies import moves
from fathom.policies.excerpts import Cut, combine, cut_cell, read_cell
from fathom.policies.json_records import index_cell
from fathom.policies.looking import Sight, read_question
from fathom.policies.tabular import plan, table_cell, table_shape
from fathom.tasks import generate_task
from fathom.tasks.schema import write_tasks

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("move_paths", ROOT / "bench/move_paths.py")
move_paths = importlib.util.module_from_spec(spec)
spec.loader.exec_module(move_paths)
Q = read_question("Which orders did the customer of order ORD-4242 place? List every order id.")


@pytest.mark.parametrize("seed", range(4))
def test_each_teacher_move_is_named_by_its_code(seed):
    rng = random.Random(seed)
    head = "# export of 4 shards\ndept;salary;city;id\nSales;100;Rome;E1\nSupport;;Oslo;E2\nSales;250;Oslo;E3"
    shape = table_shape(Sight(head=head))
    table = plan(read_question("What is the total 'salary' among rows where 'dept' is 'Sales'?"), shape)
    cells = {
        "look": moves.look(rng),
        "search": moves.search(rng, ["ORD-4242", "customer"]),
        "follow": moves.follow(rng, ["ORD-4242"], 6),
        "cut": cut_cell(rng, Cut(("ORD-4242",), paragraph=30, follow=True)),
        "read": read_cell(rng, Q),
        "answer": combine(rng, Q, ["ORD-1", "ORD-2"], 2),
        "table": table_cell(rng, shape, table),
        "records": index_cell(rng, ["ORD-4242", "customer"]),
    }
    assert {name: move_paths.move_of(text) for name, text in cells.items()} == {name: name for name in cells}
    assert move_paths.move_of("I think.\n```repl\nprint(1)\n```") == "other"


def test_the_student_and_teacher_paths_and_their_first_parting(tmp_path, monkeypatch):
    task = generate_task("multikey", 0, 8192)
    (row,) = TeacherPolicy(tokenizer_name="tiny-qwen", max_turns=10).run([task])
    teacher_path = [move_paths.move_of(t["text"]) for t in row["trace"]["turns"]]
    assert teacher_path[:3] == ["look", "search", "follow"]
    # a student that cut where the teacher followed, and was wrong
    cut = {"text": cut_cell(random.Random(0), Cut(("x",)))}
    student = dict(row["trace"], turns=[*row["trace"]["turns"][:2], cut])
    (tmp_path / "traces.jsonl").write_text(json.dumps({"id": task.id, "trace": student}) + "\n")
    (tmp_path / "eval.jsonl").write_text(json.dumps({"id": task.id, "correct": False}) + "\n")
    write_tasks(tmp_path / "tasks.jsonl", [task])
    out = tmp_path / "paths.json"
    argv = [str(tmp_path / n) for n in ("traces.jsonl", "eval.jsonl", "tasks.jsonl")]
    monkeypatch.setattr(sys, "argv", ["move_paths.py", *argv, "--json", str(out)])
    move_paths.main()
    got = json.loads(out.read_text())
    assert got["summary"] == {
        "tasks": 1,
        "teacher_correct": int(row["correct"]),
        "student_correct": 0,
        "first_parting_turn": {"2": 1},
    }
    assert got["tasks"][0]["student"] == ["look", "search", "cut"]
    assert got["tasks"][0]["teacher"] == teacher_path
