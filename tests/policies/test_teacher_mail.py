"""The teacher's mail move: a thread's messages found by their headers in code, senders looked up in the staff
directory by address, on every question kind, From style and directory layout of the mail families."""

from __future__ import annotations

import random

import pytest
from teacher_play import run_cell

from fathom.eval.policies import TeacherPolicy
from fathom.policies.looking import read_question
from fathom.policies.mail_headers import (
    answer_turn,
    entry,
    mail_question,
    parse_thread,
    sender_cell,
    senders,
    thread_cell,
)
from fathom.tasks import Corpora, generate_task, mail

CORPORA = Corpora()


def _hits(question: str) -> dict:
    """What the search move shows for a quoted subject: its Subject: lines."""
    return {t: (1, [f"Subject: {t}"]) for t in read_question(question).quoted}


def _play(question: str, document: str) -> list[object]:
    ask = mail_question(read_question(question), _hits(question))
    assert ask is not None, question
    finals: list[object] = []
    env = {"ctx": document, "FINAL": finals.append}
    addresses = senders(ask, parse_thread(run_cell(thread_cell(random.Random(0), ask), env)))
    assert addresses, question
    printed = run_cell(sender_cell(random.Random(0), ask, addresses), env)
    if ask.want != "addresses":
        final = answer_turn(random.Random(0), ask, printed)
        assert final is not None, printed
        run_cell(final, env)
    return finals


@pytest.mark.parametrize("family", ["email_manager", "email_repliers"])
@pytest.mark.parametrize("length", [8192, 32768])
def test_the_cells_answer_as_the_generator_on_every_kind(family, length):
    kinds = set()
    for seed in range(12):
        task = generate_task(family, seed, length, ("easy", "medium", "hard")[seed % 3], CORPORA)
        kinds.add(task.meta["kind"])
        finals = _play(task.question, task.document)
        want = sorted(task.answer) if isinstance(task.answer, list) else task.answer
        assert [sorted(f) if isinstance(f, list) else f for f in finals] == [want], task.question
    assert kinds == ({"starter", "first_reply"} if family == "email_manager" else {"names", "addresses"})


def test_every_template_reads_as_its_kind():
    wants = {"starter": "manager", "first_reply": "manager", "names": "names", "addresses": "addresses"}
    for questions in (mail.MANAGER_QUESTIONS, mail.REPLIER_QUESTIONS):
        for kind, phrasings in questions.items():
            for template in phrasings.templates:
                question = template.format(subject="Budget review for calm fjord")
                ask = mail_question(read_question(question), _hits(question))
                op = kind if kind in ("starter", "first_reply") else "repliers"
                assert ask is not None and (ask.title, ask.op, ask.want) == (
                    "Budget review for calm fjord",
                    op,
                    wants[kind],
                ), template


def test_a_subject_the_search_did_not_find_on_a_header_is_no_mail_question():
    question = 'Who started the e-mail thread "Budget review"?'
    assert (
        mail_question(read_question(question), {"Budget review": (2, ["The Budget review is late."])}) is None
    )


@pytest.mark.parametrize(
    "text",
    [
        "| Team | Manager | Name | E-mail | / | Platform | Vivian Ramos | Kira Marsh | kira@x.example |",
        "Amber Vance <amber@x.example> — Platform; reports to Vivian Ramos / Kira Marsh <kira@x.example> — "
        "Platform; reports to Vivian Ramos",
        "name: Kira Marsh / email: kira@x.example / team: Platform / manager: Vivian Ramos",
    ],
)
def test_a_directory_entry_gives_name_and_manager_in_every_layout(text):
    assert entry(text, "kira@x.example") == ("Kira Marsh", "Vivian Ramos")


def test_the_teachers_mail_transcripts_are_grounded_whether_or_not_the_look_showed_a_header():
    # half the mailboxes open with the staff directory, so the look shows no header line: the thread cell names
    # only Subject (which the search printed) and reads the other header names off what it prints
    tasks = [
        generate_task("email_manager", seed, 8192, ("easy", "medium", "hard")[seed % 3]) for seed in range(12)
    ]
    looks = [t.document[:900] for t in tasks]
    assert any("From: " not in head for head in looks) and any("From: " in head for head in looks)
    rows = TeacherPolicy().run(tasks)
    assert [(r["correct"], r["grounded"], r["llm_calls"]) for r in rows] == [(True, True, 0)] * len(tasks)
