"""bench/reader_swap.py: a recorded episode replayed with its recorded turns and reader replies reproduces every
observation, and hands each llm() call the chunk the student's reader was shown."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from fathom.eval.policies import TeacherPolicy
from fathom.rollout import ChatFormat
from fathom.tasks import generate_task
from fathom.tasks.schema import write_tasks

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("reader_swap", ROOT / "bench/reader_swap.py")
reader_swap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reader_swap)


def test_a_replay_reproduces_the_episode_and_its_reader_calls():
    task = generate_task("glossary_defined", 0, 8192)  # an unseen family, whose teacher delegates its reading
    teacher = TeacherPolicy(tokenizer_name="tiny-qwen", max_turns=10)
    (row,) = teacher.run([task])
    trace = row["trace"]
    recorded = [s for t in trace["turns"] for s in t["subcalls"]]
    assert recorded, "the teacher's episode should read through llm()"
    chat = ChatFormat(teacher.chat.tokenizer)
    calls, differ = reader_swap.replay(trace, task, chat, teacher.sub_max_input_tokens, max_turns=10)
    assert differ == 0
    assert [(p, r) for p, _, r in calls] == [(s["prompt"], s["reply"]) for s in recorded]
    assert all(0 < len(chunk) <= s["chunk_chars"] for (_, chunk, _), s in zip(calls, recorded, strict=True))
    # a replay that does not see what the episode saw is counted, not hidden
    trace["turns"][0]["observation"] += "something else"
    assert reader_swap.replay(trace, task, chat, teacher.sub_max_input_tokens, max_turns=10)[1] == 1


def test_gold_is_held_only_when_every_item_is():
    assert reader_swap.holds("calls: Encode_Lily, pack_fox", ["encode_lily", "pack_fox"])
    assert not reader_swap.holds("calls: encode_lily", ["encode_lily", "pack_fox"])


def test_the_teachers_episodes_come_as_an_eval_samples_rows_with_their_scores():
    tasks = [generate_task(family, seed, 8192) for family in ("code_calls", "niah") for seed in range(3)]
    rows = reader_swap.teacher_rows(tasks, "tiny-qwen", per_family=2, max_turns=10, sub_input=4096)
    assert [r["trace"]["task_id"] for r in rows] == [t.id for t in (tasks[0], tasks[1], tasks[3], tasks[4])]
    assert all(isinstance(r["correct"], bool) for r in rows) and any(r["correct"] for r in rows)


def test_only_gold_asks_the_second_reader_only_where_the_chunk_holds_the_answer(tmp_path, monkeypatch):
    # glossary_lookup at 32K: the teacher reads some chunks that lack the answer
    tasks = [
        generate_task(family, seed, 32768, "medium")
        for family in ("glossary_lookup", "niah")
        for seed in range(2)
    ]
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    rows = reader_swap.teacher_rows(tasks, "tiny-qwen", per_family=2, max_turns=10, sub_input=4096)
    (tmp_path / "traces.jsonl").write_text("".join(json.dumps({"trace": r["trace"]}) + "\n" for r in rows))
    out = tmp_path / "swap.json"
    argv = [
        "reader_swap.py",
        str(tmp_path / "traces.jsonl"),
        str(tmp_path / "tasks.jsonl"),
        "--reader",
        "tiny-qwen",
    ]
    argv += ["--max-new-tokens", "4", "--only-gold", "--families", "glossary_lookup", "--out", str(out)]
    argv += ["--sub-system", "Reply with the headword alone."]
    monkeypatch.setattr(sys, "argv", argv)
    # the flag sets the engine's constant; monkeypatch puts the original back after the test
    monkeypatch.setattr(reader_swap.engine_module, "SUB_SYSTEM", reader_swap.engine_module.SUB_SYSTEM)
    reader_swap.main()
    result = json.loads(out.read_text())
    calls = result["calls"]
    assert calls and {c["family"] for c in calls} == {"glossary_lookup"}  # niah's episodes left out
    assert result["summary"]["episodes"] == 2
    asked = [c for c in calls if "new" in c]
    assert asked == [c for c in calls if c["chunk_holds_gold"]]
    assert result["summary"]["asked_the_reader"] == len(asked) > 0
    assert len(asked) < len(calls), "some chunk without the answer should have been left unasked"
    assert result["summary"]["sub_system"] == "Reply with the headword alone."
    by_id = {t.id: t for t in tasks}
    for c in asked:  # each reply scored as the root's answer, with the task's own metric
        task = by_id[c["task"]]
        assert c["new_as_answer"] == reader_swap.score(task.metric, c["new"], task.answer)
    assert result["summary"]["new_as_answer_full"] == sum(c["new_as_answer"] == 1.0 for c in asked)
