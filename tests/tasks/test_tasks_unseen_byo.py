"""The unseen split (no training source ever yields an unseen family) and bring-your-own task files."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fathom.cli import main
from fathom.tasks import (
    FAMILIES,
    SEEN_FAMILIES,
    UNSEEN_FAMILIES,
    InvalidTaskError,
    UnseenFamilyError,
    generate_task,
    load_tasks,
    validate_task,
    write_tasks,
)
from fathom.tasks.build import SplitSpec
from fathom.tasks.haystack import estimate_tokens
from fathom.train.config import TierConfig
from fathom.train.tasksource import TaskSource


def test_unseen_families_are_registered_several_and_of_several_shapes():
    assert len(UNSEEN_FAMILIES) >= 6 and set(UNSEEN_FAMILIES) <= set(FAMILIES)
    assert not set(UNSEEN_FAMILIES) & set(SEEN_FAMILIES)
    assert set(UNSEEN_FAMILIES) | set(SEEN_FAMILIES) == set(FAMILIES)
    assert len({name.split("_")[0] for name in UNSEEN_FAMILIES}) >= 4


@pytest.fixture(scope="module")
def built(tmp_path_factory, corpora):
    out = tmp_path_factory.mktemp("unseen")
    args = ["data", "build", "--out", str(out), "--no-progress", "--lengths", "2K"]
    args += ["--train", "24", "--eval", "12", "--heldout", "12", "--heldout-unseen", "12"]
    assert main(args) == 0
    return out


def test_build_writes_heldout_unseen_beside_heldout(built):
    splits = {n: load_tasks(built / f"{n}.jsonl") for n in ("train", "eval", "heldout", "heldout_unseen")}
    assert {t.family for t in splits["heldout_unseen"]} == set(UNSEEN_FAMILIES)
    for name in ("train", "eval", "heldout"):
        assert len(splits[name]) > 0
        assert not {t.family for t in splits[name]} & set(UNSEEN_FAMILIES), name
    for task in splits["heldout_unseen"]:
        validate_task(task)


def test_specs_that_mix_up_seen_and_unseen_are_refused(tmp_path, corpora):
    with pytest.raises(UnseenFamilyError, match="split 'train' uses unseen families"):
        SplitSpec("train", 3, (2048,), (UNSEEN_FAMILIES[0], "niah"))
    with pytest.raises(ValueError, match="only unseen families"):
        SplitSpec("heldout_unseen", 3, (2048,), ("niah",))
    with pytest.raises(SystemExit, match="unknown families"):
        main(["data", "build", "--out", str(tmp_path), "--families", UNSEEN_FAMILIES[0]])


def test_task_source_never_draws_an_unseen_family():
    source = TaskSource([TierConfig("all", lengths=(2048,), difficulties=("easy",))], seed=3)
    drawn = {source.generate(0, i, "train").family for i in range(120)}
    assert drawn <= set(SEEN_FAMILIES) and len(drawn) >= 8
    with pytest.raises(UnseenFamilyError, match="curriculum tier 'bad'"):
        TaskSource([TierConfig("bad", families=(UNSEEN_FAMILIES[1],))], seed=0)


def test_task_source_refuses_unseen_train_and_eval_files(built):
    tier = [TierConfig("t", lengths=(2048,), difficulties=("easy", "medium", "hard"))]
    with pytest.raises(UnseenFamilyError, match="train file"):
        TaskSource(tier, 0, built / "heldout_unseen.jsonl")
    source = TaskSource(tier, 0, built / "train.jsonl")
    assert len(source.eval_set(0, 5, 0, built / "eval.jsonl")) == 5
    with pytest.raises(UnseenFamilyError, match="eval file"):
        source.eval_set(0, 5, 0, built / "heldout_unseen.jsonl")


# ---- bring-your-own tasks --------------------------------------------------------------------------
def test_a_four_key_task_line_loads_with_defaults(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "manual.txt").write_text("Chapter 1. The door is red.\n" * 40, encoding="utf-8")
    lines = [
        {"id": "q1", "question": "What colour is the door?", "answer": "red", "document": "The door is red."},
        {"id": "q2", "question": "Door colour?", "answer": "red", "document_path": "docs/manual.txt"},
        {"id": "q3", "question": "Which?", "answer": ["a", "b"], "metric": "set_f1", "document": "a b"},
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    q1, q2, q3 = load_tasks(path)
    assert (q1.family, q1.metric, q1.difficulty, q1.seed) == ("custom", "exact", "unrated", 0)
    assert q1.length_chars == 16 and q1.length_tokens == estimate_tokens("The door is red.")
    assert q2.length_chars == 28 * 40 and q2.read_document().startswith("Chapter 1")
    assert q3.metric == "set_f1"
    for task in (q1, q2, q3):
        validate_task(task)
    assert main(["data", "check", str(path), "--validate"]) == 0
    again = tmp_path / "written" / "out.jsonl"
    again.parent.mkdir()
    write_tasks(again, [q1, q2, q3])
    assert [t.length_chars for t in load_tasks(again)] == [16, 1120, 3]


def test_byo_lines_still_get_clear_errors(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    lines = [
        {"id": "a", "question": "q", "answer": ["x"], "document": "x"},
        {"id": "b", "answer": "x", "document": "x"},
        {"id": "c", "question": "q", "answer": "x", "document": "x", "length_chars": 99},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    assert main(["data", "check", str(path), "--validate"]) == 1
    out = capsys.readouterr().out
    assert 'a list answer needs "metric": "set_f1"' in out
    assert "missing key(s): question" in out
    assert "length_chars 99 != document length 1" in out


def test_a_generated_task_still_validates_by_its_family(corpora):
    task = generate_task("niah", 2, 2048, "easy", corpora)
    validate_task(task)
    with pytest.raises(InvalidTaskError):
        validate_task(dataclasses.replace(task, answer="0000000"))


def test_post_reset_accepts_a_four_key_task():
    from fastapi.testclient import TestClient

    from fathom.server import ServerConfig, create_app

    task = {
        "id": "byo-1",
        "question": "What colour is the door?",
        "answer": "red",
        "document": "The door is red.",
    }
    with TestClient(create_app(ServerConfig(max_sessions=2, idle_timeout_s=None))) as http:
        reply = http.post("/reset", json={"task": task})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert body["observation"]["doc_chars"] == 16
        bad = http.post("/reset", json={"task": {"id": "x", "answer": "red", "document": "d"}})
        assert bad.status_code == 422 and "missing key(s): question" in bad.text
        http.delete(f"/session/{body['session_id']}")
