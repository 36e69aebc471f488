"""Metrics logged on rank 0 are means over every rollout of every rank, not rank 0's own.

`fathom_reward` hands TRL one value per rollout; TRL then sums values and counts over the ranks
(``GRPOTrainer._generate_and_score_completions``: ``gather([sum, len])``). Here two ranks' rollouts, one rank
with infrastructure failures (no ``accuracy`` for those), go through `fathom_reward` and that reduction.
A real two-process run checks the same against the traces in tests/train/test_multigpu.py (slow).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from fathom.train.rollout_func import fathom_reward


def logged(infos):
    pending = defaultdict(list)  # TRL's _pending_metrics
    rewards = fathom_reward(
        [None] * len(infos), [0.0] * len(infos), infos, log_metric=lambda k, v: pending[k].append(v)
    )
    assert rewards == [0.0] * len(infos)
    return pending


def test_logged_metrics_reduce_to_the_mean_over_all_rollouts_of_all_ranks():
    rank0 = [{"accuracy": 1.0, "behaviour/turns": 2.0}, {"behaviour/turns": 4.0}, {"behaviour/turns": 6.0}]
    rank1 = [{"accuracy": 0.0, "behaviour/turns": 1.0} for _ in range(3)]
    per_rank = [logged(rank0), logged(rank1)]
    for key in ("accuracy", "behaviour/turns"):
        total = sum(sum(p[key]) for p in per_rank)  # what TRL gathers: [sum, count] per rank
        count = sum(len(p[key]) for p in per_rank)
        values = [info[key] for info in rank0 + rank1 if key in info]
        assert total / count == pytest.approx(sum(values) / len(values))
    # accuracy over the 4 rollouts that have one: 1/4 (one mean per rank would give (1 + 0) / 2)
    assert sum(sum(p["accuracy"]) for p in per_rank) / sum(len(p["accuracy"]) for p in per_rank) == 0.25
