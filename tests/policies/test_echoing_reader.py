"""`EchoingReader` turns a configured share of the teacher reader's not-found replies into a name the
question asks about, the same ones every time, and leaves every other reply as it was."""

from __future__ import annotations

import asyncio

import pytest

from fathom.env.sublm import SubLMRequest
from fathom.policies.looking import read_question
from fathom.policies.moves import READ_MARK, asked_about
from fathom.policies.readers import NOT_FOUND, EchoingReader, teacher_reader
from fathom.tasks import generate_task

TASK = generate_task("logs_next", 4, 8192)
PROMPT = f"Read the text and answer the question.\n{READ_MARK}{TASK.question}"
CHUNKS = [f"line {i}: nothing about it" for i in range(400)]  # none holds the answer
COUNT = "How many entries did billing-api log after request 9dee8e7f?"


def replies(reader: EchoingReader, prompt: str, chunks: list[str]) -> list[str]:
    out = asyncio.run(reader.complete([SubLMRequest(prompt, c) for c in chunks]))
    return [r.text for r in out]


def test_share_zero_never_echoes_and_share_one_echoes_every_not_found_reply():
    assert replies(EchoingReader(teacher_reader(), 0.0, 7), PROMPT, CHUNKS) == [NOT_FOUND] * len(CHUNKS)
    named = asked_about(read_question(TASK.question))
    assert named  # the question names a request id
    every = EchoingReader(teacher_reader(), 1.0, 7)
    got = replies(every, PROMPT, CHUNKS)
    assert all(r in named for r in got)
    assert every.echoed == {(PROMPT, c) for c in CHUNKS}


def test_a_found_reply_and_a_count_question_are_untouched():
    every = EchoingReader(teacher_reader(), 1.0, 7)
    found = replies(every, PROMPT, [TASK.document])  # the whole log answers the question
    assert found == [str(TASK.answer)]
    counted = f"Answer.\n{READ_MARK}{COUNT}"
    assert replies(every, counted, CHUNKS[:20]) == [NOT_FOUND] * 20
    assert every.echoed == set()


def test_the_share_is_kept_and_the_draw_replays_per_seed():
    first = replies(EchoingReader(teacher_reader(), 0.25, 3), PROMPT, CHUNKS)
    again = replies(EchoingReader(teacher_reader(), 0.25, 3), PROMPT, CHUNKS)
    other = replies(EchoingReader(teacher_reader(), 0.25, 4), PROMPT, CHUNKS)
    echoes = sum(r != NOT_FOUND for r in first)
    assert first == again and first != other
    assert 60 <= echoes <= 140  # 400 draws at 0.25: 100 expected
    with pytest.raises(ValueError, match=r"echo share must be in \[0, 1\]"):
        EchoingReader(teacher_reader(), 1.5, 0)
