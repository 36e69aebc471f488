"""``bench/gpu_rollouts.py spec``'s numerics: how far greedy turns with n-gram speculation agree with the
engine's own (the check that runs beside the speed figure on the GPU), on episodes built here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fathom.rollout.episode import Episode, Turn

BENCH = Path(__file__).parents[2] / "bench" / "gpu_rollouts.py"


@pytest.fixture(scope="module")
def turn_agreement():
    spec = importlib.util.spec_from_file_location("gpu_rollouts", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.turn_agreement


def episode(task_id: str, *turns: tuple[list[int], list[float]]) -> Episode:
    return Episode(task_id, [1], turns=[Turn("", ids, lp, True) for ids, lp in turns])


def test_identical_greedy_turns_agree_fully(turn_agreement):
    a = [episode("t1", ([5, 6, 7], [-0.1, -0.2, -0.3])), episode("t2", ([8], [-1.0]))]
    b = [episode("t1", ([5, 6, 7], [-0.1, -0.25, -0.3])), episode("t2", ([8], [-1.0]))]
    assert turn_agreement(a, b) == {
        "turns": 2, "turns_identical": 1.0, "tokens_before_first_difference": 1.0, "max_logprob_gap": 0.05,
    }  # fmt: skip


def test_a_turn_that_departs_counts_only_its_prefix(turn_agreement):
    a = [episode("t1", ([5, 6, 7, 8], [-0.1, -0.2, -0.3, -0.4]), ([1, 2], [-0.5, -0.5]))]
    b = [episode("t1", ([5, 6, 9], [-0.1, -0.2, -3.0]), ([1, 2], [-0.5, -0.7]))]
    got = turn_agreement(a, b)
    assert got["turns"] == 2 and got["turns_identical"] == 0.5
    assert got["tokens_before_first_difference"] == round(4 / 6, 4)  # 2 of 4, then 2 of 2
    assert got["max_logprob_gap"] == 0.2  # the departing token's own gap (2.7) is not compared


def test_episodes_out_of_order_fail_loudly(turn_agreement):
    with pytest.raises(ValueError, match="out of order"):
        turn_agreement([episode("t1", ([1], None))], [episode("t2", ([1], None))])


def test_turns_saved_by_one_engine_process_compare_as_episodes(turn_agreement):
    """`spec` runs each engine in its own process and compares the turns each saved as JSON."""
    module = turn_agreement.__globals__
    plain = [{"task_id": "t1", "turns": [[[5, 6, 7], [-0.1, -0.2, -0.3]], [[1], [-0.5]]]}]
    spec = [{"task_id": "t1", "turns": [[[5, 6, 7], [-0.1, -0.2, -0.4]], [[2], [-0.5]]]}]
    got = turn_agreement(module["episodes_of"](plain), module["episodes_of"](spec))
    assert got == {"turns": 2, "turns_identical": 0.5, "tokens_before_first_difference": 0.75,
                   "max_logprob_gap": 0.1}  # fmt: skip
