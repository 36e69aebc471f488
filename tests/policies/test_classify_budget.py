"""The teacher's labelling calls (`moves.classify`) get replies that fit the student's reply budget: the
student answers llm() in ``rollout.sub_max_new_tokens`` (128) tokens in GRPO and evaluation, and a longer
reply is cut, its labels then misaligned with the records (and SFT would not train on it as a reader row)."""

from __future__ import annotations

import random

import pytest

from fathom.models import ModelSpec, load_tokenizer
from fathom.policies import moves
from fathom.policies.readers import teacher_reader
from fathom.policies.teacher import play_teacher
from fathom.rollout import ChatFormat
from fathom.tasks import generate_task
from fathom.tasks.records import LABELS
from fathom.train.config import TrainConfig
from fathom.train.reader_sft import RecordingSubLM, reply_ids

BUDGET = TrainConfig().rollout.sub_max_new_tokens  # what GRPO and evaluation give an llm() reply


@pytest.fixture(scope="module")
def chat():
    return ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))  # the Qwen2.5 tokenizer, as the student's


def play(chat, tasks):
    reader = RecordingSubLM(teacher_reader())
    return play_teacher(chat, tasks, max_turns=10, reader=reader), reader.calls


def labelling(calls):
    return [c for c in calls if "categor" in c["prompt"].lower() and moves.CLASSIFY_WORDS in c["prompt"]]


def test_the_longest_label_fills_a_chunk_within_the_budget(chat):
    assert BUDGET == 128
    longest = max(LABELS, key=lambda label: len(reply_ids(chat, label)))
    worst = "\n".join([longest] * max(moves.CLASSIFY_CHUNKS))
    assert len(reply_ids(chat, worst)) <= BUDGET


@pytest.mark.parametrize("family", ["oolong", "pairs"])
def test_the_teachers_labelling_replies_fit_the_budget(chat, family):
    tasks = [generate_task(family, seed, n) for seed, n in ((0, 8192), (1, 32768), (2, 131072))]
    episodes, calls = play(chat, tasks)
    assert [e.correct for e in episodes] == [True] * len(tasks)
    replies = [len(reply_ids(chat, c["reply"])) for c in labelling(calls)]
    assert len(replies) >= 3680 // max(moves.CLASSIFY_CHUNKS)  # the 128K document's records alone
    assert max(replies) <= BUDGET, sorted(replies)[-5:]


def test_the_chunks_grow_only_to_keep_within_the_episodes_llm_calls():
    code = moves.classify(random.Random(0), 2, list(LABELS))
    per = next(int(n) for n in moves.CLASSIFY_CHUNKS if f"max({n}," in code)
    scope = {"recs": [("d", "u", f"q{i}") for i in range(11_700)]}
    for n, want in ((3_799, per), (11_700, 11_700 // moves.CLASSIFY_CALLS + 1)):
        line = next(ln for ln in code.splitlines() if ln.startswith("per = "))
        exec(f"texts = [rec[2] for rec in recs[:{n}]]\n{line}", scope)
        assert scope["per"] == want
        assert -(-n // scope["per"]) <= moves.CLASSIFY_CALLS


@pytest.mark.slow
def test_a_400k_labelling_task_stays_within_the_llm_calls(chat):
    episodes, calls = play(chat, [generate_task("oolong", 0, 409600)])
    assert episodes[0].correct
    assert len(calls) <= moves.CLASSIFY_CALLS
