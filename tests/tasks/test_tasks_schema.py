"""Task files: round trips, and a battery of malformed lines rejected with file, line number and reason."""

from __future__ import annotations

import json

import pytest

from fathom.cli import main
from fathom.tasks import Task, TaskFileError, load_tasks, write_tasks
from fathom.tasks.schema import read_task_file


def good(**changes) -> dict:
    task = {
        "id": "t1",
        "family": "niah",
        "question": "What is the special magic number for brave-falcon mentioned in the provided text?",
        "answer": "1234567",
        "metric": "exact",
        "length_tokens": 8192,
        "length_chars": 20,
        "difficulty": "easy",
        "seed": 3,
        "document": "a haystack, no needle",
    }
    task.update(changes)
    return {k: v for k, v in task.items() if v is not ...}


def write_lines(path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


BAD_LINES = [
    ("{not json", "bad JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('"a string"', "expected a JSON object"),
    (json.dumps(good(question=...)), "missing key(s): question"),
    (json.dumps(good(question=..., answer=...)), "missing key(s): question, answer"),
    (json.dumps(good(metric=..., answer=["a"])), 'a list answer needs "metric": "set_f1"'),
    (json.dumps(good(metric="bleu")), "unknown metric 'bleu'"),
    (json.dumps(good(answer=["1234567"])), "metric 'exact' needs"),
    (json.dumps(good(answer="")), "metric 'exact' needs"),
    (json.dumps(good(metric="numeric", answer="seven")), "metric 'numeric' needs"),
    (json.dumps(good(metric="numeric", answer=True)), "metric 'numeric' needs"),
    (json.dumps(good(metric="set_f1", answer="a, b")), "metric 'set_f1' needs a list"),
    (json.dumps(good(metric="set_f1", answer=[[1, 2, 3]])), "2-item lists"),
    (json.dumps(good(metric="set_f1", answer=["a", [1, 2]])), "2-item lists"),
    (json.dumps(good(document_path="docs/x.txt")), "exactly one of 'document' and 'document_path'"),
    (json.dumps(good(document=...)), "exactly one of 'document' and 'document_path'"),
    (json.dumps(good(document=..., document_path="docs/missing.txt")), "document file not found"),
    (json.dumps(good(document=..., document_path="/etc/passwd")), "relative path"),
    (json.dumps(good(document=..., document_path="../outside.txt")), "relative path"),
    (json.dumps(good(extra=1)), "unknown key(s): extra"),
    (json.dumps(good(length_tokens=-5)), "'length_tokens' must be an int >= 0"),
    (json.dumps(good(length_chars="20")), "'length_chars' must be an int"),
    (json.dumps(good(seed=1.5)), "'seed' must be an int"),
    (json.dumps(good(id="")), "'id' must be a non-empty string"),
    (json.dumps(good(document=7)), "'document' must be a string"),
    (json.dumps(good(meta=[1])), "'meta' must be an object"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_LINES, ids=[r for _, r in BAD_LINES])
def test_each_malformed_line_is_rejected_with_its_line_number(tmp_path, line, reason):
    path = tmp_path / "tasks.jsonl"
    write_lines(path, [json.dumps(good(id="ok")), line])
    with pytest.raises(TaskFileError) as info:
        load_tasks(path)
    assert info.value.problems[0][0] == 2
    assert reason in info.value.problems[0][1]
    assert f"{path}:2: " in str(info.value)


def test_every_bad_line_is_reported_and_good_ones_kept(tmp_path):
    path = tmp_path / "tasks.jsonl"
    lines = [json.dumps(good(id=f"ok{i}")) for i in range(3)] + [line for line, _ in BAD_LINES]
    lines.insert(1, "")  # blank lines are skipped, not errors
    lines.append(json.dumps(good(id="ok0")))  # duplicate id
    write_lines(path, lines)
    tasks, problems = read_task_file(path)
    assert [t.id for t in tasks] == ["ok0", "ok1", "ok2"]
    assert [n for n, _ in problems] == list(range(5, 5 + len(BAD_LINES) + 1))
    assert "duplicate id 'ok0' (first on line 1)" in problems[-1][1]


def test_check_command_prints_every_bad_line_and_fails(tmp_path, capsys):
    path = tmp_path / "tasks.jsonl"
    write_lines(path, [json.dumps(good()), "{oops", json.dumps(good(id="t2", metric="rouge"))])
    assert main(["data", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"{path}:2: bad JSON" in out and f"{path}:3: unknown metric 'rouge'" in out


def test_check_command_passes_a_good_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_lines(path, [json.dumps(good()), json.dumps(good(id="t2", metric="numeric", answer=4.5))])
    assert main(["data", "check", str(path)]) == 0


def test_round_trip_with_document_files(tmp_path):
    tasks = [
        Task(**{**good(id="a/1", document="x" * 50, length_chars=50)}),
        Task(**{**good(id="b", document="short", length_chars=5, metric="set_f1", answer=[[1, 2], [3, 4]])}),
    ]
    path = tmp_path / "out" / "tasks.jsonl"
    path.parent.mkdir()
    written = write_tasks(path, tasks, inline_max_chars=10)
    assert written[0].document is None and written[0].document_path == "docs/a_1.txt"
    assert written[1].document == "short"  # small enough to stay inline
    loaded = load_tasks(path)
    assert loaded == written
    assert loaded[0].document_file() == (path.parent / "docs" / "a_1.txt").resolve()
    assert loaded[0].read_document() == "x" * 50
    assert loaded[1].document_file() is None and loaded[1].read_document() == "short"
    assert "base_dir" not in path.read_text()


def test_rewriting_elsewhere_copies_documents_once(tmp_path):
    first = tmp_path / "one" / "tasks.jsonl"
    first.parent.mkdir()
    write_tasks(first, [Task(**good(document="abc" * 10, length_chars=30))])
    loaded = load_tasks(first)
    again = write_tasks(first, loaded)  # same place: nothing to copy
    assert again[0].document_file() == loaded[0].document_file()
    second = tmp_path / "two" / "tasks.jsonl"
    second.parent.mkdir()
    moved = write_tasks(second, loaded)
    assert moved[0].document_file() == (second.parent / "docs" / "t1.txt").resolve()
    assert load_tasks(second)[0].read_document() == "abc" * 10
    inline = write_tasks(tmp_path / "inline.jsonl", loaded, docs_dir=None)
    assert inline[0].document == "abc" * 10 and inline[0].document_path is None


def test_document_path_needs_a_base_dir():
    task = Task(**good(document=None, document_path="docs/x.txt"))
    with pytest.raises(ValueError, match="base_dir"):
        task.read_document()
