"""Teacher slips on real tasks through the real environment: a slipped cell fails with the error it was
written to raise, the next turn names that error and runs, and the episode still ends correct and grounded;
with no slips the transcripts are the strategy's own, turn for turn."""

from __future__ import annotations

import random

import pytest

from fathom.models import ModelSpec, load_tokenizer
from fathom.policies.grounding import check_trace
from fathom.policies.looking import read_question
from fathom.policies.scripted import ScriptedBackend
from fathom.policies.slips import ERROR_LINE, slipped
from fathom.policies.teacher import (
    _give_up,
    play,
    play_teacher,
    slip_turns,
    split_conversation,
    teacher_backend,
)
from fathom.rollout import ChatFormat
from fathom.tasks import generate_task

TASKS = [
    ("babi", 0, 8192),
    ("bundle_locate", 0, 8192),
    ("chat_count", 2, 8192),
]  # solved through the reader view
TURN_BUDGET = 384  # the student's new tokens a turn in the GPU proof (test_teacher_budget checks the recipe)


def _run(backend, chat):
    return play_teacher(
        chat, [generate_task(f, seed, n) for f, seed, n in TASKS], max_turns=24, backend=backend
    )


@pytest.fixture(scope="module")
def chat():
    return ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))  # the Qwen2.5 tokenizer, as the student's


@pytest.fixture(scope="module")
def slipping(chat):
    return _run(teacher_backend(chat, 0, slips=1.0), chat)


def test_every_slip_fails_is_named_repaired_and_the_episode_ends_correct(slipping, chat):
    kinds = set()
    for episode in slipping:
        conversation = chat.tokenizer.decode(episode.prompt_ids + episode.completion_ids)
        slips = slip_turns(conversation, 0, 1.0)
        assert slips == list(range(0, len(episode.turns) - 1, 2))  # every cell slips once, then is repaired
        for i in slips:
            error = ERROR_LINE.search(episode.turns[i].observation)
            assert error is not None, episode.turns[i].observation
            assert "Traceback" in episode.turns[i].observation or error.group(1) == "SyntaxError"
            kinds.add(error.group(1))
            repair = episode.turns[i + 1]
            assert repair.text.startswith(f"The cell failed with {error.group(0)};")
            assert ERROR_LINE.search(repair.observation) is None, repair.observation
        assert episode.correct
        assert check_trace(episode.to_json()).ok
        assert max(len(t.ids) for t in episode.turns) <= TURN_BUDGET
    assert kinds == {"NameError", "SyntaxError"}


def test_no_slips_plays_the_strategy_unchanged(chat, slipping):
    def plain(conversation: str) -> str:  # the strategy replayed with nothing around it
        question, observations, llm_ok = split_conversation(conversation)
        rng = random.Random(f"teacher/0/{question}")
        game = play(read_question(question), rng, llm_ok)
        try:
            text = next(game)
            for obs in observations:
                text = game.send(obs)
        except StopIteration:
            return _give_up(rng)
        return text

    ours, theirs = _run(teacher_backend(chat, 0, slips=0.0), chat), _run(ScriptedBackend(chat, plain), chat)
    assert [e.completion_ids for e in ours] == [e.completion_ids for e in theirs]
    # the repaired transcript's cells are the unslipped one's, in order
    for slipped_episode, episode in zip(slipping, ours, strict=True):
        assert [t.text.split("```repl")[1] for t in slipped_episode.turns[1::2]] == [
            t.text.split("```repl")[1] for t in episode.turns
        ]


def test_the_slip_draw_depends_on_seed_question_and_cell_only():
    draws = [slipped("0/q", i, 0.3) for i in range(200)]
    assert draws == [slipped("0/q", i, 0.3) for i in range(200)]
    assert 30 < sum(draws) < 90  # about 0.3 of 200
    assert draws != [slipped("1/q", i, 0.3) for i in range(200)]
    assert not any(slipped("0/q", i, 0.0) for i in range(200))
