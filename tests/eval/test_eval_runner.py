"""`fathom eval` end to end: the expert through the CLI, a hand-written task file, resume after a kill,
the rlm policy within its context window, and refusing to mix results of different policies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fathom.cli import main
from fathom.eval import EvalConfigMismatch, read_rows, run_eval
from fathom.eval.policies import ExpertPolicy
from fathom.eval.runner import drop_partial_line
from fathom.tasks import load_tasks, write_tasks

ROW_KEYS = {
    "id", "family", "length_tokens", "difficulty", "answer", "gold", "correct", "score", "reward",
    "breakdown", "turns", "tokens", "llm_calls", "cost_tokens", "context_used", "end_reason", "wall_s", "policy",
}  # fmt: skip


def test_expert_through_the_cli_is_accurate(heldout_file, tmp_path):
    out = tmp_path / "expert"
    status = main(
        ["eval", "--policy", "expert", "--tasks", str(heldout_file), "--out", str(out), "--no-progress",
         "--batch-size", "16"]
    )  # fmt: skip
    assert status == 0
    rows = read_rows(out / "eval.jsonl")
    assert len(rows) == 21 and set(rows[0]) >= ROW_KEYS
    summary = json.loads((out / "summary.json").read_text())
    assert summary["groups"]["all"]["accuracy"] >= 0.95 and summary["n_rows"] == 21
    assert set(summary["groups"]) >= {"family/oolong", "length/8K", "length/32K", "length/128K"}
    assert summary["groups"]["length/128K"]["n"] == 7
    oolong = [r for r in rows if r["family"] == "oolong"]
    assert all(r["llm_calls"] > 0 and r["cost_tokens"] > r["tokens"] for r in oolong)  # reading costs
    traces = read_rows(out / "traces.jsonl")  # the full episodes, kept out of eval.jsonl
    assert [t["id"] for t in traces] == [r["id"] for r in rows] and "trace" not in rows[0]
    oolong_trace = next(t["trace"] for t in traces if t["id"] == oolong[0]["id"])
    assert sum(len(turn["subcalls"]) for turn in oolong_trace["turns"]) == oolong[0]["llm_calls"]


@pytest.mark.parametrize(
    ("content", "kept"),
    [(b"", b""), (b"a\n", b"a\n"), (b"a\nbc", b"a\n"), (b"abc", b""), (b"x\n" + b"y" * 1000, b"x\n")],
)
def test_drop_partial_line(tmp_path, content, kept):
    path = tmp_path / "f.jsonl"
    path.write_bytes(content)
    drop_partial_line(path, block=7)  # small blocks: the scan back crosses block boundaries
    assert path.read_bytes() == kept


def write_hand_made(folder: Path) -> Path:
    """A task file written by hand (not by `write_tasks`): inline and file documents, three metrics."""
    needle = "One of the special magic numbers for {} is: {}."
    filler = "The quick brown fox jumps over the lazy dog. " * 40
    doc = f"{filler}\n{needle.format('brave-otter', '1234567')}\n{filler}\n{needle.format('calm-heron', '7654321')}\n"
    (folder / "docs").mkdir()
    (folder / "docs" / "far.txt").write_text(filler * 20 + needle.format("quiet-lynx", "5550123") + "\n")
    base = {"metric": "exact", "difficulty": "easy", "seed": 0, "family": "niah"}
    question = "What is the special magic number for {} mentioned in the provided text? Answer with the 7-digit number only."
    lines = [
        {**base, "id": "hand-1", "question": question.format("brave-otter"), "answer": "1234567",
         "length_tokens": 1000, "length_chars": len(doc), "document": doc},
        {**base, "id": "hand-2", "question": question.format("calm-heron"), "answer": 7654321,
         "length_tokens": 1000, "length_chars": len(doc), "document": doc, "meta": {"by": "hand"}},
        {**base, "id": "hand-3", "question": question.format("quiet-lynx"), "answer": "5550123",
         "length_tokens": 20000, "length_chars": 0, "document_path": "docs/far.txt"},
    ]  # fmt: skip
    path = folder / "hand.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    return path


def test_hand_written_task_file(tmp_path):
    path = write_hand_made(tmp_path)
    out = tmp_path / "expert"
    assert main(["eval", "--policy", "expert", "--tasks", str(path), "--out", str(out), "--no-progress"]) == 0
    rows = read_rows(out / "eval.jsonl")
    assert [r["id"] for r in rows] == ["hand-1", "hand-2", "hand-3"]
    assert [r["answer"] for r in rows] == ["1234567", "7654321", "5550123"]
    assert all(r["correct"] and r["end_reason"] == "answered" for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["groups"]) == ["all", "family/niah", "length/1K", "length/32K"]

    # the same file through the direct baseline with the tiny model: rows for every task, scored
    out = tmp_path / "direct"
    status = main(
        ["eval", "--policy", "direct", "--model", "tiny-smol", "--tasks", str(path), "--out", str(out),
         "--no-progress", "--max-new-tokens", "4", "--device", "cpu"]
    )  # fmt: skip
    assert status == 0
    rows = read_rows(out / "eval.jsonl")
    assert [r["id"] for r in rows] == ["hand-1", "hand-2", "hand-3"]
    assert [r["truncated"] for r in rows] == [False, False, True]  # 2K context: only hand-3 is cut
    assert all(r["context_used"] <= 2048 for r in rows)


def test_expert_refuses_families_it_has_no_script_for(tmp_path):
    path = write_hand_made(tmp_path)
    lines = path.read_text().replace('"family": "niah"', '"family": "custom"')
    path.write_text(lines)
    with pytest.raises(ValueError, match="custom"):
        run_eval(ExpertPolicy(), load_tasks(path), tmp_path / "out", progress=False)


def test_resume_after_killed_subprocess(heldout_file, tmp_path):
    tasks = load_tasks(heldout_file)
    big = tmp_path / "tasks.jsonl"
    # 42 episodes (each task twice under new ids), one per batch: long enough to kill mid-run.
    (tmp_path / "docs").symlink_to(heldout_file.parent / "docs")  # same relative document paths
    big.write_text(
        "".join(json.dumps({**t.to_dict(), "id": f"{t.id}-r{k}"}) + "\n" for k in range(2) for t in tasks)
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "fathom", "eval", "--policy", "expert", "--tasks", str(big),
               "--out", str(out), "--batch-size", "1", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    eval_file = out / "eval.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if eval_file.exists() and eval_file.read_bytes().count(b"\n") >= 5:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the eval finished (or died) before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = eval_file.read_bytes()
    done = before.count(b"\n")
    assert 5 <= done < 42
    with eval_file.open("ab") as f:  # as if the kill had landed in the middle of a line
        f.write(b'{"id": "half a li')

    assert main([*command[3:-3], "--batch-size", "16", "--no-progress"]) == 0  # batch size may change
    after = eval_file.read_bytes()
    assert after.startswith(before[: before.rfind(b"\n") + 1])  # nothing written before the kill is lost
    ids = [r["id"] for r in read_rows(eval_file)]
    assert len(ids) == len(set(ids)) == 42
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] == done and summary["n_rows"] == 42
    assert summary["groups"]["all"]["accuracy"] >= 0.95


def test_results_of_another_policy_are_not_mixed_in(heldout_file, tmp_path):
    tasks = load_tasks(heldout_file)[:2]
    run_eval(ExpertPolicy(), tasks, tmp_path, progress=False)
    config = json.loads((tmp_path / "eval_config.json").read_text())
    (tmp_path / "eval_config.json").write_text(json.dumps({**config, "policy": "direct", "model": "x"}))
    with pytest.raises(EvalConfigMismatch, match="policy=direct"):
        run_eval(ExpertPolicy(), tasks, tmp_path, progress=False)
    summary = run_eval(ExpertPolicy(), tasks, tmp_path, progress=False, overwrite=True)
    assert summary["resumed_from"] == 0 and summary["n_rows"] == 2


def test_rlm_policy_stays_inside_its_context(heldout_file, tmp_path):
    from fathom.eval.policies import RLMPolicy
    from fathom.rollout import Sampling

    policy = RLMPolicy(
        "tiny-smol", context_tokens=1024, sampling=Sampling(max_new_tokens=48, temperature=0.0), max_turns=3,
        device="cpu",
    )  # fmt: skip
    summary = run_eval(policy, load_tasks(heldout_file)[::10], tmp_path, progress=False)
    rows = read_rows(tmp_path / "eval.jsonl")
    assert len(rows) == summary["n_rows"] == 3 and set(rows[0]) >= ROW_KEYS
    for r in rows:
        assert r["context_used"] <= 1024 and 1 <= r["turns"] <= 3
        assert r["cost_tokens"] >= r["context_used"] and r["policy"] == "rlm:tiny-smol"
    assert summary["context_tokens"] == 1024 and summary["policy"] == "rlm"


def test_several_task_files_through_one_loaded_policy(heldout_file, tmp_path):
    tasks = load_tasks(heldout_file)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_tasks(first, tasks[:3])
    write_tasks(second, tasks[3:5])
    outs = [tmp_path / "out-a", tmp_path / "out-b"]
    argv = ["eval", "--policy", "expert", "--tasks", str(first), str(second), "--out", *map(str, outs)]
    assert main([*argv, "--no-progress"]) == 0
    for out, want in zip(outs, (tasks[:3], tasks[3:5]), strict=True):
        rows = read_rows(out / "eval.jsonl")
        assert [r["id"] for r in rows] == [t.id for t in want]
        assert json.loads((out / "summary.json").read_text())["task_file"].endswith(out.name[-1] + ".jsonl")
    with pytest.raises(SystemExit, match=r"2 --tasks file\(s\) but 1 --out"):
        main(["eval", "--policy", "expert", "--tasks", str(first), str(second), "--out", str(outs[0])])


def test_repetition_penalty_is_recorded_and_reaches_the_sub_calls(tmp_path):
    from fathom.eval.policies import RLMPolicy
    from fathom.rollout import Sampling

    path = write_hand_made(tmp_path)
    for policy in ("direct", "rlm"):  # every policy an evaluation compares is decoded the same way
        out = tmp_path / policy
        status = main(
            ["eval", "--policy", policy, "--model", "tiny-smol", "--tasks", str(path), "--out", str(out),
             "--no-progress", "--max-new-tokens", "8", "--max-turns", "1", "--limit", "2", "--device", "cpu",
             "--repetition-penalty", "1.2"]
        )  # fmt: skip
        assert status == 0
        summary = json.loads((out / "summary.json").read_text())
        assert summary["repetition_penalty"] == 1.2 and summary["temperature"] == 0.0
        assert summary["n_rows"] == 2
    policy = RLMPolicy("tiny-smol", sampling=Sampling(max_new_tokens=8, repetition_penalty=1.2), device="cpu")
    assert policy.sub_sampling.repetition_penalty == 1.2 and policy.sub_sampling.temperature == 0.0
    assert RLMPolicy("tiny-smol", device="cpu").describe()["repetition_penalty"] == 1.0


def test_the_readers_view_is_set_and_recorded(tmp_path):
    from fathom.eval.policies import RLMPolicy

    path = write_hand_made(tmp_path)
    out = tmp_path / "rlm"
    status = main(
        ["eval", "--policy", "rlm", "--model", "tiny-smol", "--tasks", str(path), "--out", str(out),
         "--no-progress", "--max-new-tokens", "8", "--max-turns", "1", "--limit", "1", "--device", "cpu",
         "--sub-max-input-tokens", "768"]
    )  # fmt: skip
    assert status == 0
    assert json.loads((out / "summary.json").read_text())["sub_max_input_tokens"] == 768
    # without it: the window less the reply, as before
    assert RLMPolicy("tiny-smol", device="cpu").describe()["sub_max_input_tokens"] == 2048 - 128


def test_a_reader_model_answers_the_llm_calls_and_is_recorded(tmp_path):
    from fathom.eval.policies import RLMPolicy
    from fathom.rollout.service import RoutedService

    policy = RLMPolicy("tiny-smol", device="cpu", reader_model="tiny-smol")
    assert isinstance(policy.service, RoutedService) and policy.service.base_adapter
    assert policy.service.base is not policy.service.main  # a model of its own, not the policy's
    assert policy.describe()["reader_model"] == "tiny-smol"
    assert RLMPolicy("tiny-smol", device="cpu").describe()["reader_model"] is None
    with pytest.raises(ValueError, match="another tokenizer than the policy"):
        RLMPolicy("tiny-smol", device="cpu", reader_model="tiny-qwen")
    path = write_hand_made(tmp_path)
    out = tmp_path / "rlm"
    argv = ["eval", "--policy", "rlm", "--model", "tiny-smol", "--tasks", str(path), "--out", str(out),
            "--no-progress", "--max-new-tokens", "8", "--max-turns", "1", "--limit", "1", "--device", "cpu",
            "--reader-model", "tiny-smol"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads((out / "summary.json").read_text())["reader_model"] == "tiny-smol"
    with pytest.raises(SystemExit, match="--reader-model is for --policy rlm"):
        main([*argv[:2], "direct", *argv[3:]])


def test_a_reader_model_answers_the_teachers_llm_calls(tmp_path):
    from fathom.eval.policies import TeacherPolicy
    from fathom.tasks import generate_task

    tasks = [generate_task(f, 51 + i, 8192, "medium") for i, f in enumerate(("multikey", "babi"))]
    solver = TeacherPolicy().run(tasks)
    policy = TeacherPolicy(reader_model="tiny-smol", device="cpu")
    assert (
        policy.describe()["reader_model"] == "tiny-smol"
        and TeacherPolicy().describe()["reader_model"] is None
    )
    rows = policy.run(tasks)
    replies = [s["reply"] for r in rows for t in r["trace"]["turns"] for s in t["subcalls"]]
    # every llm() call went to the model, none to the solver: its request count is the calls made
    assert replies and policy.reader.service.stats.requests == len(replies) == sum(
        r["llm_calls"] for r in rows
    )
    solved = [s["reply"] for r in solver for t in r["trace"]["turns"] for s in t["subcalls"]]
    assert solved and solved[0] not in replies  # the solver's first reply is not what the model wrote
    assert all(r["correct"] for r in solver)  # the solver's reader solves these; tiny-smol's replies do not
    assert not any(r["correct"] for r in rows)
    with pytest.raises(ValueError, match="another tokenizer"):
        TeacherPolicy(reader_model="tiny-qwen", device="cpu")  # the teacher's ids are tiny-smol's
    out = tmp_path / "teacher-br"
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, tasks[:1])
    argv = ["eval", "--policy", "teacher", "--reader-model", "tiny-smol", "--tasks", str(path), "--out", str(out),
            "--no-progress", "--device", "cpu"]  # fmt: skip
    assert main([*argv, "--step-timeout", "240"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["reader_model"] == "tiny-smol" and summary["label"] == "teacher:tiny-smol reads"
    assert summary["step_timeout_s"] == 240.0 and summary["repetition_penalty"] == 1.0
    penalised = TeacherPolicy(reader_model="tiny-smol", device="cpu", repetition_penalty=1.2)
    assert penalised.sub_sampling.repetition_penalty == 1.2 and penalised.sub_sampling.temperature == 0.0
    assert penalised.describe()["repetition_penalty"] == 1.2
    with pytest.raises(ValueError, match="for a reader model"):
        TeacherPolicy(repetition_penalty=1.2)
    with pytest.raises(SystemExit, match="its --reader-model's"):
        main(
            [
                "eval",
                "--policy",
                "teacher",
                "--repetition-penalty",
                "1.2",
                "--tasks",
                str(path),
                "--out",
                str(out),
            ]
        )


def test_the_teacher_cuts_its_reading_into_the_chunk_size_it_is_given(tmp_path):
    from fathom.eval.policies import TeacherPolicy
    from fathom.policies.excerpts import CHUNK_CHARS
    from fathom.tasks import generate_task

    task = generate_task("manual_default", 3, 8192, "medium")  # the teacher reads excerpts of it with llm()

    def chunks(policy: TeacherPolicy) -> list[int]:
        (row,) = policy.run([task])
        assert row["correct"]  # the solver reads either way; only how much a call holds changes
        return [s["chunk_chars"] for t in row["trace"]["turns"] for s in t["subcalls"]]

    default, small = chunks(TeacherPolicy()), chunks(TeacherPolicy(chunk_size=1000))
    assert max(small) <= 1000 < max(default) <= CHUNK_CHARS
    assert len(small) > 3 * len(default)  # the same excerpt, in more and smaller calls
    assert TeacherPolicy(chunk_size=1000).describe()["chunk_chars"] == 1000
    assert TeacherPolicy().describe()["chunk_chars"] == CHUNK_CHARS
    path, out = tmp_path / "tasks.jsonl", tmp_path / "teacher-small"
    write_tasks(path, [task])
    argv = ["eval", "--tasks", str(path), "--out", str(out), "--no-progress"]
    assert main([*argv, "--policy", "teacher", "--teacher-chunk-chars", "1000", "--label", "t1k"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["chunk_chars"] == 1000 and summary["label"] == "t1k"
    with pytest.raises(SystemExit, match="for --policy teacher"):
        main([*argv, "--policy", "rlm", "--teacher-chunk-chars", "1000"])
    with pytest.raises(SystemExit):  # argparse: must be > 0
        main([*argv, "--policy", "teacher", "--teacher-chunk-chars", "0"])


def test_the_step_time_limit_reaches_the_environment(capsys):
    from fathom.rollout import RolloutConfig
    from fathom.rollout.wiring import env_config

    assert env_config(RolloutConfig(step_timeout_s=240.0)).step_timeout_s == 240.0
    assert env_config(RolloutConfig()).step_timeout_s == 60.0  # the environment's own default
    with pytest.raises(ValueError, match="step_timeout_s must be > 0"):
        RolloutConfig(step_timeout_s=0)
    with pytest.raises(SystemExit):
        main(["eval", "--policy", "teacher", "--tasks", "t.jsonl", "--out", "o", "--step-timeout", "0"])
    assert "must be > 0" in capsys.readouterr().err
