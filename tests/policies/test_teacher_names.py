"""The teacher's name moves: snake_case names searched whole, CONST_NAMES followed, and the line where a
name used all over the document is defined (a sender's directory row among the headers of its messages)."""

from __future__ import annotations

import random

import pytest
from teacher_play import cell_code

from fathom.eval.policies import TeacherPolicy
from fathom.policies.excerpts import CHUNK_CHARS, Cut, cut_cell, defined_cells, read_cell
from fathom.policies.looking import read_question
from fathom.policies.moves import follow
from fathom.tasks import generate_task


def test_snake_case_names_are_read_whole_and_not_twice():
    q = read_question("In the signature of sync_pine, which default does chunk_size have?")
    assert q.snake == ("sync_pine", "chunk_size")
    q = read_question("Resolve timeout_ms for the section named exactly proxy.eu-643. What is it?")
    assert q.snake == ("timeout_ms",) and q.anchors == ("proxy.eu-643",)
    assert read_question("Who is the manager of the person who started it?").snake == ()


def test_follow_reaches_a_constant_named_with_underscores():
    ctx = "x = 1\nCRIMSON_SWAN = 77\n\ndef f():\n    pass\nWOOLLY_OTTER = CRIMSON_SWAN * 4\nWOOLLY_OTTER_MAX = 3\n"
    env = {"ctx": ctx}
    exec(cell_code(follow(random.Random(0), ["WOOLLY_OTTER"], 6)), env)
    assert [env["lines"][i] for i in env["reached"]] == [
        "CRIMSON_SWAN = 77",
        "WOOLLY_OTTER = CRIMSON_SWAN * 4",
    ]


def _mailbox() -> str:
    directory = "Staff directory\n\n| Name | E-mail | Manager |\n|---|---|---|\n"
    directory += "| Ravi Acosta | ravi@x.example | Walter Jansen |\n| Walter Jansen | walt@x.example | — |"
    messages = []
    for n in range(14):  # ravi's address is on every message: too common to follow, yet defined once
        subject = "Budget review" if n == 7 else f"Note {n}"
        sender = "ravi@x.example" if n % 2 else "walt@x.example"
        messages.append(
            f"===== Message {n} =====\nFrom: {sender}\nSubject: {subject}\nTo: ravi@x.example\n\nBody."
        )
    return "\n\n".join([directory, *messages])


def test_defined_cells_keep_the_hits_and_the_one_odd_line_of_each_name_they_use():
    ctx = _mailbox()
    q = read_question('Who manages whoever started "Budget review"?')
    cut = cell_code(cut_cell(random.Random(0), Cut(("Budget review",), paragraph=30, follow=True)))
    env = {"ctx": ctx}
    exec(cut, env)
    assert not any("Ravi Acosta" in env["lines"][i] for i in env["kept"])  # too common to follow
    keep, read = defined_cells(random.Random(0), q, 0)  # the keeping and the reading do not fit one turn
    del env["paragraph"]  # the cell defines the helper it calls itself
    exec(cell_code(keep), env)
    kept = [env["lines"][i] for i in env["kept"]]
    assert kept == [
        "| Name | E-mail | Manager |",  # the row's paragraph: a short table comes whole, header included
        "|---|---|---|",
        "| Ravi Acosta | ravi@x.example | Walter Jansen |",
        "| Walter Jansen | walt@x.example | — |",
        "===== Message 7 =====",
        "From: ravi@x.example",
        "Subject: Budget review",
        "To: ravi@x.example",
    ]
    assert "llm_batch(" in read and "llm_batch(" not in keep


def test_a_read_cell_chunks_the_kept_lines_on_line_boundaries_keeping_gaps():
    q = read_question("Which port does the proxy use?")
    lines = [f"line {i} " + "x" * (CHUNK_CHARS // 14 - 10) for i in range(40)]
    kept = [0, 1, 2, *range(5, 30)]
    asked: list[tuple[str, str]] = []
    env = {
        "lines": lines,
        "kept": kept,
        "llm_batch": lambda items: asked.extend(items) or ["8080"] * len(items),
    }
    exec(cell_code(read_cell(random.Random(0), q)), env)
    chunks = [chunk for _, chunk in asked]
    assert len(chunks) == 2 and all(len(c) <= CHUNK_CHARS for c in chunks)
    assert "".join(chunks).split("\n") == [*lines[0:3], "", *lines[5:30], ""]  # every kept line once, a gap
    assert all(prompt.endswith("Question: " + q.text) for prompt, _ in asked)
    assert env["replies"] == ["8080", "8080"]


@pytest.fixture(scope="module")
def rows():
    tasks = [generate_task("email_manager", 3, 131072)]
    tasks += [generate_task("code_value", s, 131072) for s in (3, 4)]
    assert [t.meta["kind"] for t in tasks[1:]] == ["final", "default"]
    return TeacherPolicy().run(tasks)


def test_the_teacher_solves_long_email_and_code_lookups_grounded(rows):
    assert [(r["family"], r["correct"], r["grounded"]) for r in rows] == [
        ("email_manager", True, True),
        ("code_value", True, True),
        ("code_value", True, True),
    ]
    # The mailbox's sender is found by the thread's headers and looked up in the directory by address, in code.
    observations = [t["observation"] for t in rows[0]["trace"]["turns"]]
    assert any(" in the thread" in o for o in observations) and any(" -> " in o for o in observations)
    assert rows[0]["llm_calls"] == 0
