"""The teacher checks the sense of a reply before submitting it: a reply that only repeats a name the
question gave (the request id it asks about) is not an answer, and the teacher reads wider instead."""

from __future__ import annotations

import random
import re

import pytest
from teacher_play import qwen_chat

from fathom.env.sublm import ScriptedSubLM
from fathom.policies.grounding import check_trace
from fathom.policies.looking import read_question
from fathom.policies.moves import READ_MARK, answer_reply, asked_about
from fathom.policies.readers import teacher_reader
from fathom.policies.teacher import play_teacher
from fathom.tasks import FAMILIES, generate_task

# config_lookup tasks whose reading cell is handed the asked section's lines without the inherited key: a
# reader shown them echoes the section's name (logs_next, where a small model echoed a request id on the GPU,
# is answered in code now: `fathom.policies.log_entries`)
ECHO_SEEDS = (0, 3)
TURN_BUDGET = 384  # the student's new tokens a turn in the GPU proof (test_teacher_budget checks the recipe)


def _named(prompt: str, chunk: str) -> list[str]:
    """The names with a digit that the read prompt's question asks about and the chunk shows."""
    question = prompt.rpartition(READ_MARK)[2].split("Question:", 1)[-1].strip()
    return [n for n in asked_about(read_question(question)) if re.search(r"\d", n) and n in chunk]


def _echoing_read(prompt: str, chunk: str) -> str:
    """The teacher's reader, except that where the chunk does not answer it hands back a name the question
    asks about when the chunk shows it: the mistake a small model made on the GPU."""
    reply = teacher_reader().fn(prompt, chunk)
    named = _named(prompt, chunk)
    return named[0] if "not found" in reply and named else reply


@pytest.fixture(scope="module")
def echo_episodes():
    tasks = [generate_task("config_lookup", seed, 8192) for seed in ECHO_SEEDS]
    episodes = play_teacher(qwen_chat(), tasks, max_turns=12, reader=ScriptedSubLM(_echoing_read))
    return list(zip(tasks, episodes, strict=True))


def test_a_reply_echoing_the_questions_id_is_not_submitted_and_a_wider_read_answers(echo_episodes):
    for task, episode in echo_episodes:
        names = [n for n in asked_about(read_question(task.question)) if re.search(r"\d", n)]
        texts = [t.text for t in episode.turns]
        observations = [t.observation for t in episode.turns]
        # the reader did echo: one llm() reply was a name the question gave
        assert any(f"'{n}'" in obs for n in names for obs in observations), task.question
        check = next(i for i, obs in enumerate(observations) if "only repeats the question: True" in obs)
        assert "FINAL(answer)" in texts[check] and any(
            n in texts[check] for n in names
        )  # the cell's own check
        assert episode.answer not in names
        assert episode.correct and episode.answer == task.answer  # the wider read found the answer
        assert check_trace(episode.to_json()).ok
        assert max(len(t.ids) for t in episode.turns) <= TURN_BUDGET


def _run_answer_cell(cell: str, reply: str) -> tuple[list[object], str]:
    """Run an answer cell's code with `reply` set: what it FINALed, and what it printed."""
    code = cell.split("```repl\n", 1)[1].rsplit("```", 1)[0]
    finals: list[object] = []
    printed: list[str] = []
    env = {"reply": reply, "FINAL": finals.append, "print": lambda *a: printed.append(" ".join(map(str, a)))}
    exec(code, env)
    return finals, "\n".join(printed)


@pytest.mark.parametrize(
    ("question", "reply", "submitted"),
    [
        (
            "What is the request id of the entry right after the entry with request id 9dee8e7f?",
            "9DEE8E7F",
            [],
        ),
        ("What is the request id of the entry right after the entry with request id 9dee8e7f?", "", []),
        (
            "What is the request id of the entry right after the entry with request id 9dee8e7f?",
            "326ecd74",
            ["326ecd74"],
        ),
        ("Who did Mary give the apple to?", "Mary", []),
        ("List all the keys that point to KEY-77, separated by commas.", "KEY-77, KEY-12", []),
        (
            "List all the keys that point to KEY-77, separated by commas.",
            "KEY-12, KEY-9",
            [["KEY-12", "KEY-9"]],
        ),
        (
            "Which command, `ctl import-x` or `ctl build-y`, has the longer option list?",
            "ctl build-y",
            ["ctl build-y"],
        ),
        ("How many entries did billing-api log after request 9dee8e7f?", "9", [9]),
        # the reply a read prompt asks for when the text lacks the answer is never submitted ...
        ("How many entries did billing-api log after request 9dee8e7f?", "not found in this text", []),
        ("Which sections set x? List every section name.", "Not found.", []),
        ("Who did Mary give the apple to?", "not found in this text", []),
        (
            "What is the request id of the entry right after the entry with request id 9dee8e7f?",
            "Not found in this text",
            [],
        ),
        # ... unless the question offers it as an answer
        (
            "Does a 'carrier' = 'Blue Line' row exist? Answer 'found' or 'not found'.",
            "not found",
            ["not found"],
        ),
    ],
)
def test_the_answer_cell_submits_only_a_reply_that_is_not_a_name_the_question_asks_about(
    question, reply, submitted
):
    cell = answer_reply(random.Random(0), read_question(question))
    finals, printed = _run_answer_cell(cell, reply)
    assert finals == submitted
    if not submitted and read_question(question).anchors:
        assert "read wider" in printed


def test_names_offered_as_choices_are_not_echoes_and_no_gold_is_one_the_question_asks_about():
    q = read_question(
        "Of the words pairshy / COUXAO / dousrour / BRISQUES which are headwords of the glossary? List them."
    )
    assert asked_about(q) == []
    q = read_question("Check whether a 'carrier' = 'Blue Line' row exists. Answer 'found' or 'not found'.")
    assert asked_about(q) == ["carrier", "Blue Line", "Line"]  # "found" / "not found" are offered
    q = read_question(
        "Which request id belongs to the first session-canary entry later than request 060aa7df?"
    )
    assert asked_about(q) == ["session-canary", "060aa7df"]
    # every family's answer, on tasks of each difficulty: none is a name its question asks about
    for name in FAMILIES:
        for seed, level in enumerate(("easy", "medium", "hard")):
            task = generate_task(name, 900 + seed, 8192, level)
            golds = task.answer if isinstance(task.answer, list) else [task.answer]
            named = {n.lower() for n in asked_about(read_question(task.question))}
            assert not {str(g).lower() for g in golds} & named, (name, task.question, task.answer)
