"""The trace browser's file side: finding trace files under a runs folder, refusing any other path, listing
lines (bad ones as problems), and turning each documented line shape into the viewer's one view."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fathom.server.traces import (
    TraceFormatError,
    TraceNotFound,
    find_trace_files,
    read_trace,
    resolve_trace_file,
    summaries,
    trace_view,
)

FIXTURES = Path(__file__).parent / "fixtures" / "trace-runs"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    shutil.copytree(FIXTURES, root)
    (root / "train-run" / "metrics.jsonl").write_text('{"step": 1}\n')  # not a trace file
    (root / ".hidden").mkdir()
    (root / ".hidden" / "traces.jsonl").write_text("{}\n")
    (tmp_path / "traces.jsonl").write_text("{}\n")  # beside the root, not under it
    return root


def test_finds_trace_files_only_under_the_root(runs):
    files = {f["file"]: f for f in find_trace_files(runs)}
    assert set(files) == {"eval-run/traces.jsonl", "train-run/traces.jsonl"}
    assert (
        files["train-run/traces.jsonl"]["lines"] == 4
        and files["train-run/traces.jsonl"]["run"] == "train-run"
    )
    single = find_trace_files(runs / "eval-run" / "traces.jsonl")  # --runs may name one file
    assert [f["file"] for f in single] == ["traces.jsonl"]


@pytest.mark.parametrize(
    "name",
    [
        "../traces.jsonl",
        "train-run/metrics.jsonl",
        "/etc/passwd",
        "train-run/../../traces.jsonl",
        "nope.jsonl",
    ],
)
def test_refuses_paths_that_are_not_its_trace_files(runs, name):
    with pytest.raises(TraceNotFound):
        resolve_trace_file(runs, name)


def test_refuses_a_symlink_out_of_the_root(runs, tmp_path):
    (runs / "train-run" / "traces.evil.jsonl").symlink_to(tmp_path / "traces.jsonl")
    with pytest.raises(TraceNotFound):
        resolve_trace_file(runs, "train-run/traces.evil.jsonl")


def test_summaries_list_every_line_and_flag_bad_ones(runs):
    rows = summaries(resolve_trace_file(runs, "train-run/traces.jsonl"))
    assert [r["line"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["family"] == "niah" and rows[0]["correct"] is True and rows[0]["turns"] == 2
    assert rows[0]["kind"] == "train" and rows[0]["step"] == 1
    assert rows[1]["family"] == "oolong" and rows[1]["turns"] == 3
    assert rows[2]["task_id"] == "xss-1" and rows[2]["correct"] is False
    assert "not JSON" in rows[3]["problem"]
    assert [r["line"] for r in summaries(resolve_trace_file(runs, "train-run/traces.jsonl"), 1, 2)] == [1, 2]


def test_training_record_view(runs):
    view = read_trace(resolve_trace_file(runs, "train-run/traces.jsonl"), 1)
    assert view["task"]["family"] == "oolong" and view["task"]["gold"] is not None
    assert view["start"]["system"].startswith("You answer questions")
    assert len(view["turns"]) == 3 and view["turns"][1]["subcalls"]  # oolong reads with llm()
    assert view["end"]["breakdown"]["correct"] is True
    assert view["end"]["answer"] == view["task"]["gold"] and view["end"]["end_reason"] == "answered"
    assert view["labels"] == {"kind": "train", "step": 2, "group": 0, "index": 0, "tier": "8K"}


def test_eval_trace_joins_its_eval_row(runs):
    with (runs / "eval-run" / "eval.jsonl").open("a") as f:
        f.write('{"id": "cut-off-mid-wri')  # a run still writing
    path = resolve_trace_file(runs, "eval-run/traces.jsonl")
    assert summaries(path)[0]["reward"] == 1.1 and summaries(path)[0]["correct"] is True
    view = read_trace(path, 0)
    assert view["end"]["reward"] == 1.1 and view["end"]["breakdown"]["correct"] is True
    assert view["task"]["gold"] == view["end"]["answer"] and view["labels"] == {"policy": "expert"}


def test_bare_rollout_trace_and_failed_turn():
    trace = {"task_id": "t", "system": "S", "first": "U", "turns": [{"text": "x", "error": "error: boom"}]}
    view = trace_view(trace)
    assert view["task"]["task_id"] == "t" and view["end"]["reward"] is None and view["end"]["answer"] is None
    assert view["end"]["end_reason"] is None and view["turns"][0]["error"] == "error: boom"
    assert trace_view({**trace, "breakdown": {"total": 0.5}})["end"]["reward"] == 0.5


@pytest.mark.parametrize("bad", [{"trace": {"turns": "no"}}, {"x": 1}, {"turns": [1, 2]}])
def test_lines_without_turns_are_format_errors(bad):
    with pytest.raises(TraceFormatError):
        trace_view(bad)


def test_missing_line(runs):
    path = resolve_trace_file(runs, "eval-run/traces.jsonl")
    with pytest.raises(TraceNotFound):
        read_trace(path, 5)
    with pytest.raises(TraceFormatError):
        read_trace(resolve_trace_file(runs, "train-run/traces.jsonl"), 3)
