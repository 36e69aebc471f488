"""scripts/gpu/trace_stats.py: the error, cut, repeat and recovery counts of sampled evaluation episodes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("trace_stats", ROOT / "scripts/gpu/trace_stats.py")
trace_stats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace_stats)

NAME_ERROR = (
    'Traceback (most recent call last):\n  File "<cell-3>", line 1, in <module>\n'
    "NameError: name 'kept' is not defined\n"
)
SYNTAX = "  File \"<cell-2>\", line 1\n    x = (\n        ^\nSyntaxError: '(' was never closed\n"
# a log document's own traceback, printed by a cell that ran fine: not an error of the cell
LOG_HEAD = 'Traceback (most recent call last):\n  File "/srv/app.py", line 3\nConnectionError: closed\n'


def turn(code: str, error: str | None = None, stdout: str = "", finished: bool = True, **cell) -> dict:
    """A turn in the trace-file form (`Episode.to_json`): one cell, its output as the observation."""
    record = {"code": code, "stdout": stdout, "error": error, **cell}
    observation = f"[output]\n{stdout}{error or ''}"
    return {
        "text": f"```repl\n{code}\n```",
        "finished": finished,
        "observation": observation,
        "cells": [record],
    }


def episode(end: str, *turns: dict) -> dict:
    return {"id": end, "trace": {"task_id": end, "end_reason": end, "turns": list(turns)}}


def test_counts_errors_cuts_repeats_and_recoveries(tmp_path):
    rows = [
        episode(
            "max_iterations",
            turn("print(ctx[:900])", stdout=LOG_HEAD),
            turn("read(kept)", NAME_ERROR),
            turn("read(kept)", NAME_ERROR),  # the same cell again, failing again
            turn("x = (", SYNTAX, finished=False),  # cut at the token limit
            turn("kept = [1]"),  # recovered
        ),
        episode(
            "answered",
            turn("r = llm('the question', ctx[:100])", stdout="'x'\n"),
            turn("while True: pass", "cell timed out after 30 s", timed_out=True),
            turn('FINAL(llm("""q""", ctx))'),
        ),
    ]
    stats = trace_stats.episode_stats(rows)
    assert stats["episodes"] == 2 and stats["turns"] == 8
    assert stats["end_reasons"] == {"max_iterations": 1, "answered": 1}
    assert stats["turns_with_error"] == 4
    assert stats["errors_by_kind"] == {"NameError": 2, "SyntaxError": 1, "timeout": 1}
    assert stats["undefined_names"] == {"kept": 2}
    assert stats["turns_cut_at_token_limit"] == 1
    assert stats["turns_repeating_previous_cell"] == 1
    assert stats["turns_after_an_error"] == 4 and stats["of_them_error_free"] == 2
    assert stats["turns_with_single_quoted_llm_prompt"] == 1  # the triple-quoted one is not counted

    path = tmp_path / "eval_rlm-sft-unseen_traces_sample.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace_stats.main([str(path), "--json", str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text())[path.name] == stats


def load_proof_tables(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts/gpu"))  # proof_tables imports trace_stats from there
    spec = importlib.util.spec_from_file_location("proof_tables", ROOT / "scripts/gpu/proof_tables.py")
    proof_tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(proof_tables)
    return proof_tables


def split(accuracy: float) -> dict:
    """An evaluation summary's split as the floors read it: only its overall accuracy."""
    return {"groups": {"all": {"accuracy": accuracy}}}


def test_proof_tables_reads_the_samples_a_proof_archive_holds(tmp_path, monkeypatch):
    proof_tables = load_proof_tables(monkeypatch)
    rows = [episode("answered", turn("read(kept)", NAME_ERROR), turn("FINAL(1)"))]
    (tmp_path / "eval_rlm-sft-unseen_traces_sample.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (tmp_path / "eval_no-such-policy_traces_sample.jsonl").write_text(json.dumps(rows[0]) + "\n")
    figures = proof_tables.episode_figures(tmp_path)
    assert list(figures) == [("rlm-sft", "heldout_unseen")]  # only the policies the tables know
    assert figures[("rlm-sft", "heldout_unseen")] == trace_stats.episode_stats(rows)
    assert figures[("rlm-sft", "heldout_unseen")]["of_them_error_free"] == 1


def test_counts_the_readers_replies_at_budget_looping_and_not_found():
    calls = [
        {"reply": "44, 44, 44, 44", "tokens": 128},  # at the budget, and a loop
        {"reply": "score_banjo\nscore_pepper\nscore_banjo\nscore_banjo", "tokens": 20},  # a loop
        {"reply": "a\nb\nc\na", "tokens": 8},  # a list with one repeat: not a loop
        {"reply": "not found in this text", "tokens": 6},
    ]
    row = episode("answered", turn("FINAL(1)"))
    row["trace"]["engine_subcalls"] = calls
    stats = trace_stats.reader_stats([row, episode("answered", turn("FINAL(2)"))])
    assert stats == {
        "reader_calls": 4,
        "reader_replies_at_budget": 1,
        "reader_replies_looping": 2,
        "reader_replies_not_found": 1,
    }
    assert trace_stats.episode_stats([row])["reader_replies_looping"] == 2
    assert not trace_stats.looping("")


def test_the_floors_name_the_grpo_run_that_finished_and_none_without_grpo(monkeypatch):
    proof_tables = load_proof_tables(monkeypatch)
    sft = {"rlm-sft": {"heldout": split(0.3), "heldout_unseen": split(0.0)}}
    only_sft = proof_tables.floors(sft, [])
    assert only_sft["grpo_run"] is None and only_sft["in_distribution_at_least_75pct"] == {
        "value": None,
        "met": None,
    }
    masked = proof_tables.floors({**sft, "rlm-grpo-masked": {"heldout": split(0.8)}}, [])
    assert masked["grpo_run"] == "rlm-grpo-masked" and masked["in_distribution_at_least_75pct"]["met"] is True


def test_the_untrained_readers_floors_are_checked_on_their_own_pair(monkeypatch):
    proof_tables = load_proof_tables(monkeypatch)
    found = {
        "direct": {"heldout_unseen": split(0.05)},
        "rlm-sft": {"heldout": split(0.3), "heldout_unseen": split(0.0)},
        "rlm-grpo": {"heldout": split(0.4), "heldout_unseen": split(0.02)},
        "rlm-sft-br": {"heldout": split(0.5), "heldout_unseen": split(0.2)},
        "rlm-grpo-br": {"heldout": split(0.8), "heldout_unseen": split(0.35)},
    }
    tests = [
        {"a": "rlm-grpo-br", "b": "rlm-sft-br", "split": "heldout_unseen", "points": 15.0, "p_value": 0.01}
    ]
    own, untrained = proof_tables.floors(found, tests), proof_tables.floors(found, tests, "-br")
    assert own["grpo_run"] == "rlm-grpo" and own["unseen_grpo_at_least_30pct"]["met"] is False
    assert own["unseen_grpo_5_points_over_sft_p_below_0.05"]["met"] is None  # no test of that pair
    assert untrained["grpo_run"] == "rlm-grpo-br" and untrained["sft_unseen"] == 0.2
    assert untrained["unseen_grpo_at_least_30pct"]["met"] is True
    assert untrained["unseen_grpo_20_points_over_direct"]["value"] == pytest.approx(0.30)
    assert untrained["unseen_grpo_5_points_over_sft_p_below_0.05"]["met"] is True


def test_proof_tables_writes_each_policys_rows_with_their_answers_cut(tmp_path, monkeypatch):
    proof_tables = load_proof_tables(monkeypatch)
    base = {"family": "niah", "length_tokens": 8192, "end_reason": "answered", "turns": 3, "llm_calls": 1}
    rows = [
        {**base, "id": "t0", "correct": True, "answer": "x" * 200, "tokens": 90, "reward": 1.0},
        {**base, "id": "t1", "correct": False, "answer": None, "tokens": 40, "end_reason": "max_iterations"},
    ]
    found = {"rlm-sft": {"heldout_unseen": {"groups": {}, "rows": rows}}}
    proof_tables.write_rows(found, tmp_path / "rows.jsonl")
    written = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [(w["policy"], w["split"], w["id"], w["correct"]) for w in written] == [
        ("rlm-sft", "heldout_unseen", "t0", True),
        ("rlm-sft", "heldout_unseen", "t1", False),
    ]
    assert written[0]["answer"] == "x" * 80 and written[1]["answer"] is None
    assert "reward" not in written[0] and written[1]["end_reason"] == "max_iterations"


def test_the_teacher_with_the_untrained_reader_is_paired_with_the_student_reading_alike(monkeypatch):
    proof_tables = load_proof_tables(monkeypatch)

    def evaluated(*correct: bool) -> dict:
        rows = [{"id": f"t{i}", "correct": c} for i, c in enumerate(correct)]
        return {"groups": {"all": {"accuracy": sum(correct) / len(correct)}}, "rows": rows}

    found = {
        "teacher": {"heldout_unseen": evaluated(True, True, True, False)},
        "teacher-br": {"heldout_unseen": evaluated(True, True, False, False)},
        "rlm-sft-br": {"heldout_unseen": evaluated(False, True, False, False)},
    }
    tests = {(t["a"], t["b"]): t for t in proof_tables.comparisons(found)}
    assert set(tests) == {("rlm-sft-br", "teacher-br"), ("teacher-br", "teacher")}
    student = tests["rlm-sft-br", "teacher-br"]
    assert (student["split"], student["n"], student["only_a"], student["only_b"]) == (
        "heldout_unseen",
        4,
        0,
        1,
    )
    assert student["points"] == -25.0 and tests["teacher-br", "teacher"]["only_b"] == 1


def test_a_reply_cycling_through_a_few_items_is_a_loop_and_a_list_of_names_is_not():
    labels = ["abbreviation", "entity", "description", "human being", "location", "numeric value"]
    cycling = "\n".join(["entity"] + labels * 3 + labels[:2])  # the untrained reader labelling lines
    assert trace_stats.looping(cycling)
    assert trace_stats.looping("x, sync_a, sync_b, sync_a, sync_b, sync_a, sync_b")
    assert not trace_stats.looping("x, sync_a, sync_b, sync_a, sync_b")  # two repeats: not yet a loop
    assert not trace_stats.looping("\n".join(labels))  # each label once
    assert not trace_stats.looping("pack_fox, score_willow, resolve_stork, encode_lily, pack_bramble")
