"""The expert policy solves >= 95% of every family at every length, through the real step interface."""

from __future__ import annotations

import asyncio

import pytest

from fathom.env import EnvConfig, RLMAction, RLMEnvironment
from fathom.policies.expert import EXPERTS, expert_turn
from fathom.policies.readers import expert_reader
from fathom.tasks import generate_task


async def _solve(task, reader) -> dict:
    env = RLMEnvironment(EnvConfig(), sub_lm=reader)
    try:
        obs = await env.reset_async(task=task)
        turn = 0
        while not obs.done:
            obs = await env.step_async(RLMAction(text=expert_turn(task, turn)))
            turn += 1
        return {"correct": obs.reward_breakdown["correct"], "turns": turn, "calls": env.state.llm_calls}
    finally:
        await env.aclose()


def _run(family: str, lengths: list[int], seeds: range) -> list[dict]:
    async def go():
        reader = expert_reader()
        tasks = [generate_task(family, s, n) for n in lengths for s in seeds]
        return await asyncio.gather(*(_solve(t, reader) for t in tasks))

    return asyncio.run(go())


@pytest.mark.parametrize("family", sorted(EXPERTS))  # the families it has a program for
def test_expert_solves_every_family(family):
    results = _run(family, [8192, 32768], range(12))
    assert sum(r["correct"] for r in results) / len(results) >= 0.95
    assert all(r["turns"] <= 3 for r in results)  # look, (read), answer
    reads = family in ("oolong", "pairs", "babi")
    assert all((r["calls"] > 0) == reads for r in results)  # sub-calls only where reading is needed


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(EXPERTS))  # the families it has a program for
def test_expert_solves_every_family_at_a_million_tokens(family):
    results = _run(family, [262_144, 1_048_576], range(3))
    assert sum(r["correct"] for r in results) / len(results) >= 0.95


def test_expert_refuses_unknown_family():
    task = generate_task("niah", 0, 8192)
    with pytest.raises(ValueError, match="no expert"):
        expert_turn(type("T", (), {"family": "nope", "question": task.question})(), 0)
