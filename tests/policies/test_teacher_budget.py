"""The teacher's turns fit the new tokens a turn the student generates under in the GPU proof: a teacher
teaches only what the student can write within its own budget (SFT drops any transcript that does not)."""

from __future__ import annotations

from pathlib import Path

import pytest
from teacher_play import qwen_chat

from fathom.policies.excerpts import _searched
from fathom.policies.teacher import play_teacher
from fathom.tasks import generate_task
from fathom.train.configfile import load_config

GPU_RECIPE = Path(__file__).parents[2] / "configs" / "smollm2-135m-gpu.toml"  # the proof's recipe
# Tasks whose cut cells (the hits, their paragraphs and the identifiers they name; a name's defining line)
# took 386-410 Qwen2.5 tokens a turn before the cells were shortened (bundle_locate seed 1 was one; since
# every cell defines its own helpers it needs an eleventh turn, so seed 0, whose longest turn is as long)
TASKS = [
    ("bundle_locate", 0, 8192),
    ("manual_default", 4, 8192),
    ("chat_prev", 0, 8192),
    ("email_manager", 2, 8192),
    ("config_lookup", 0, 8192),
    ("glossary_lookup", 3, 32768),
    # the code moves' cells: a table's filter and operation, a log parsed into entries, Python searched, JSON
    # records indexed by the question's words and filtered (seed 4 asks an arg-max)
    ("table_aggregate", 0, 8192),
    ("logs_count", 1, 8192),
    ("code_value", 2, 8192),
    ("jsonl_lookup", 4, 8192),
]


@pytest.fixture(scope="module")
def episodes():
    # turns of up to 512 tokens (the engine's default): a turn over 384 shows
    # its reader shown what the proof's Qwen student is shown (scripts/gpu/proof.sh SUB_INPUT)
    tasks = [generate_task(f, seed, n) for f, seed, n in TASKS]
    return play_teacher(qwen_chat(), tasks, max_turns=10, sub_max_input_tokens=4096)


def test_the_teachers_turns_fit_the_students_budget(episodes):
    budget = load_config(GPU_RECIPE).rollout.max_new_tokens
    assert budget == 384
    assert [e.correct for e in episodes] == [True] * len(TASKS)
    longest = {f: max(len(t.ids) for t in e.turns) for (f, _, _), e in zip(TASKS, episodes, strict=True)}
    assert all(n <= budget for n in longest.values()), longest


def test_a_phrase_is_not_searched_when_a_shorter_key_is_in_it():
    keys = ("I'll be RITA HAYWORTH!!", "RITA", "Big Red", "big red", "sync_pine_worker", "sync_pine")
    # the phrase's lines are among RITA's hits; case variants of one phrase stay (neither is shorter); a
    # name stays whole (`low` also tells a key from a name to follow)
    assert _searched(keys) == ["RITA", "Big Red", "big red", "sync_pine_worker", "sync_pine"]
