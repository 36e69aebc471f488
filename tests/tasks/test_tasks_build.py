"""`fathom data build`: byte-identical rebuilds, no shared document or question, per-split lengths."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from fathom.cli import main
from fathom.tasks import SEEN_FAMILIES, build, load_tasks, validate_task
from fathom.tasks.build import SplitSpec, build_dataset, check_disjoint, task_seed
from fathom.tasks.haystack import parse_length

ARGS = ["--train", "14", "--eval", "7", "--heldout", "7", "--heldout-unseen", "6"]
ARGS += ["--lengths", "2K", "--heldout-lengths", "3K,4K"]


@pytest.fixture(scope="module")
def built(tmp_path_factory, corpora):
    out = tmp_path_factory.mktemp("build") / "a"
    assert main(["data", "build", "--out", str(out), "--seed", "5", "--no-progress", *ARGS]) == 0
    return out


def tree(folder) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_two_builds_are_byte_identical(built, tmp_path):
    again = tmp_path / "b"
    assert main(["data", "build", "--out", str(again), "--seed", "5", "--no-progress", *ARGS]) == 0
    assert tree(built) == tree(again)
    other = tmp_path / "c"
    assert main(["data", "build", "--out", str(other), "--seed", "6", "--no-progress", *ARGS]) == 0
    assert tree(other)["train.jsonl"] != tree(built)["train.jsonl"]


def test_splits_have_the_asked_sizes_lengths_and_all_families(built):
    splits = {name: load_tasks(built / f"{name}.jsonl") for name in ("train", "eval", "heldout")}
    assert {k: len(v) for k, v in splits.items()} == {"train": 14, "eval": 7, "heldout": 7}
    families = {t.family for t in splits["train"]}  # families cycle: 14 tasks, 14 distinct seen families
    assert families <= set(SEEN_FAMILIES) and len(families) == min(14, len(SEEN_FAMILIES))
    assert {t.length_tokens for t in splits["train"] + splits["eval"]} == {2048}
    assert {t.length_tokens for t in splits["heldout"]} == {3072}  # 7 tasks: one family cycle per length
    for task in splits["heldout"]:
        assert task.document is None and task.document_file().is_file()
        assert task.document_file().parent == (built / "docs").resolve()
        validate_task(task)


def test_splits_never_share_a_document_an_id_or_a_seed(built):
    splits = {name: load_tasks(built / f"{name}.jsonl") for name in ("train", "eval", "heldout")}
    check_disjoint(splits)
    docs = {
        name: {hashlib.sha256(t.read_document().encode()).hexdigest() for t in ts}
        for name, ts in splits.items()
    }
    assert (
        not docs["train"] & docs["eval"]
        and not docs["train"] & docs["heldout"]
        and not docs["eval"] & docs["heldout"]
    )
    seeds = [t.seed for ts in splits.values() for t in ts]
    assert len(set(seeds)) == len(seeds)


def test_check_disjoint_catches_a_shared_document(built):
    train = load_tasks(built / "train.jsonl")
    clone = dataclasses.replace(train[0], id="eval-clone")
    with pytest.raises(ValueError, match="same document"):
        check_disjoint({"train": train, "eval": [clone]})


def test_built_files_pass_check_with_validate(built):
    files = [str(built / f"{name}.jsonl") for name in ("train", "eval", "heldout")]
    assert main(["data", "check", *files, "--validate"]) == 0


def test_splits_never_share_a_question(built, tmp_path, corpora):
    splits = {name: load_tasks(built / f"{name}.jsonl") for name in ("train", "eval", "heldout")}
    # A bigger build too: 70 tasks per family at one short length, where templated questions would repeat.
    specs = [
        SplitSpec("train", 280, (2048,)),
        SplitSpec("eval", 105, (2048,)),
        SplitSpec("heldout", 105, (2048,)),
    ]
    bigger = build_dataset(tmp_path / "big", 7, specs, corpora, validate=False, progress=False)
    for result in (splits, bigger):
        questions = {name: [t.question for t in ts] for name, ts in result.items()}
        for name, texts in questions.items():
            assert len(set(texts)) == len(texts), f"a question repeats within {name}"
        assert not set(questions["train"]) & set(questions["eval"])
        assert not set(questions["train"]) & set(questions["heldout"])
        assert not set(questions["eval"]) & set(questions["heldout"])
        check_disjoint(result)


def test_check_disjoint_catches_a_shared_question(built):
    train = load_tasks(built / "train.jsonl")
    other = dataclasses.replace(train[1], id="eval-clone", question=train[0].question)
    with pytest.raises(ValueError, match="same question"):
        check_disjoint({"train": train[:1], "eval": [other]})


def test_build_redraws_a_repeated_question(tmp_path, corpora, monkeypatch):
    real = build.generate_task

    def three_questions(family, seed, *args):  # only three question texts exist
        return dataclasses.replace(real(family, seed, *args), question=f"question {seed % 3}")

    monkeypatch.setattr(build, "generate_task", three_questions)
    spec = SplitSpec("train", 3, (2048,), ("niah",))
    tasks = build_dataset(tmp_path / "a", 1, [spec], corpora, validate=False, progress=False)["train"]
    assert sorted(t.question for t in tasks) == ["question 0", "question 1", "question 2"]
    with pytest.raises(RuntimeError, match="repeated an earlier document or question"):
        build_dataset(
            tmp_path / "b", 1, [dataclasses.replace(spec, count=4)], corpora, validate=False, progress=False
        )


def test_build_json_records_parameters_and_corpora(built):
    info = json.loads((built / "build.json").read_text())
    assert info["seed"] == 5 and info["splits"]["heldout"]["lengths"] == [3072, 4096]
    assert set(info["corpora"]) == {"shakespeare", "kjv", "pydoc", "fortunes", "stdlib"}


def test_rebuild_removes_stale_documents(tmp_path, corpora):
    out = tmp_path / "d"
    small = ["--no-progress", "--train", "3", "--eval", "1", "--heldout", "1", "--heldout-unseen", "0"]
    small += ["--lengths", "2K"]
    assert main(["data", "build", "--out", str(out), *small, "--train", "9"]) == 0
    assert len(list((out / "docs").glob("*.txt"))) == 11
    assert main(["data", "build", "--out", str(out), *small]) == 0
    assert len(list((out / "docs").glob("*.txt"))) == 5


def test_grid_cells_and_seed_streams():
    spec = SplitSpec("train", 0, (1, 2), ("f", "g"), ("easy", "hard"))
    cells = [spec.cell(i) for i in range(8)]
    assert cells[:4] == [("f", 1, "easy"), ("g", 1, "easy"), ("f", 1, "hard"), ("g", 1, "hard")]
    assert cells[4] == ("f", 2, "easy")
    assert task_seed(0, "train", 0) != task_seed(0, "eval", 0) != task_seed(0, "train", 1)
    assert task_seed(0, "train", 0) == task_seed(0, "train", 0)


def test_parse_length():
    assert parse_length("8K") == 8192 and parse_length("1M") == 1 << 20 and parse_length("100") == 100
    for bad in ("", "x", "0", "-3K"):
        with pytest.raises(ValueError):
            parse_length(bad)


def test_unknown_family_is_a_usage_error(tmp_path):
    with pytest.raises(SystemExit, match="unknown families: nope"):
        main(["data", "build", "--out", str(tmp_path), "--families", "niah,nope"])


def test_show_and_sample_commands(built, capsys):
    assert (
        main(["data", "show", str(built / "eval.jsonl"), "--id", "eval-00003-oolong", "--chars", "80"]) == 0
    )
    out = capsys.readouterr().out
    assert "== eval-00003-oolong" in out and "question:" in out and "general-knowledge questions" in out
    assert main(["data", "show", str(built / "eval.jsonl"), "--id", "nope"]) == 1
    assert main(["data", "sample", "vartrack", "--length", "2K", "--difficulty", "easy"]) == 0
    out = capsys.readouterr().out
    assert "== vartrack-easy-2048-0" in out and "(metric set_f1)" in out
