"""Wilson intervals and the grouped summary, checked against values computed by hand."""

from __future__ import annotations

import math

import pytest

from fathom.eval.stats import group_stats, groups, length_bucket, summarize, wilson


@pytest.mark.parametrize(
    ("correct", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.27753),
        (5, 10, 0.23659, 0.76341),
        (10, 10, 0.72247, 1.0),
        (1, 20, 0.00889, 0.23613),
        (81, 100, 0.72221, 0.87485),
    ],
)
def test_wilson_matches_reference_values(correct, n, low, high):
    lo, hi = wilson(correct, n)
    assert lo == pytest.approx(low, abs=1e-5) and hi == pytest.approx(high, abs=1e-5)
    assert lo <= correct / n <= hi


def test_wilson_edges_and_errors():
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(3, 3)
    assert hi == 1.0 and lo == pytest.approx(3 / (3 + 1.959963984540054**2))
    with pytest.raises(ValueError):
        wilson(4, 3)
    with pytest.raises(ValueError):
        wilson(-1, 3)
    # wider at 99% than at 95%
    assert wilson(5, 10, z=2.5758)[0] < wilson(5, 10)[0]


def test_length_buckets():
    assert length_bucket(409_600) == "400K"  # 50x an 8K window: a task length of its own, not '512K'
    assert [length_bucket(n) for n in (8192, 5000, 8193, 32768, 100_000, 1 << 20)] == [
        "8K", "8K", "16K", "32K", "128K", "1M",
    ]  # fmt: skip


def row(family: str, length: int, correct: bool, **extra):
    return {"family": family, "length_tokens": length, "correct": correct, **extra}


def test_summary_groups_by_family_and_length():
    rows = [
        row("niah", 8192, True, reward=1.1, tokens=100, llm_calls=0),
        row("niah", 32768, False, reward=0.0, tokens=300, llm_calls=2),
        row("oolong", 8192, True, reward=1.0, tokens=200, llm_calls=4),
        row("oolong", 131072, True, reward=0.9, tokens=400, llm_calls=6),
    ]
    summary = summarize(rows)
    assert list(summary) == [
        "all", "family/niah", "family/oolong", "length/8K", "length/32K", "length/128K",
    ]  # fmt: skip
    assert summary["all"]["n"] == 4 and summary["all"]["correct"] == 3
    assert summary["all"]["accuracy"] == 0.75
    assert (summary["all"]["ci_low"], summary["all"]["ci_high"]) == pytest.approx(wilson(3, 4))
    assert summary["all"]["tokens"] == 250 and summary["all"]["llm_calls"] == 3
    assert summary["family/niah"]["accuracy"] == 0.5 and summary["family/niah"]["reward"] == pytest.approx(
        0.55
    )
    assert summary["length/8K"]["n"] == 2 and summary["length/8K"]["accuracy"] == 1.0
    assert summary["length/32K"]["accuracy"] == 0.0 and summary["length/32K"]["ci_high"] > 0.7
    assert "cost_tokens" not in summary["all"]  # absent fields are left out, not zero
    assert list(groups(summary, "length")) == ["8K", "32K", "128K"]
    assert list(groups(summary, "family")) == ["niah", "oolong"]


def test_group_stats_ignores_missing_values():
    stats = group_stats([row("a", 1, True, wall_s=1.0), row("a", 1, False, wall_s=None)])
    assert stats["wall_s"] == 1.0 and stats["accuracy"] == 0.5
    assert math.isclose(stats["ci_low"] + stats["ci_high"], 1.0)  # symmetric at p = 0.5


def test_mcnemar_exact_matches_the_binomial_tail():
    from fathom.eval.stats import mcnemar_exact

    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(1, 0) == 1.0  # one discordant task proves nothing
    assert abs(mcnemar_exact(6, 0) - 2 / 64) < 1e-12  # 2 * 0.5**6 = 0.03125
    assert abs(mcnemar_exact(8, 2) - 2 * (1 + 10 + 45) / 1024) < 1e-12  # 0.109375
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(2, 8) == mcnemar_exact(8, 2)
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_paired_counts_discordant_tasks_by_id_and_refuses_other_tasks():
    from fathom.eval.stats import paired

    a = [{"id": "t1", "correct": True}, {"id": "t2", "correct": True}, {"id": "t3", "correct": False}]
    b = [{"id": "t3", "correct": True}, {"id": "t2", "correct": True}, {"id": "t1", "correct": False}]
    result = paired(a, b)
    assert (result.n, result.only_a, result.only_b, result.p_value) == (3, 1, 1, 1.0)
    with pytest.raises(ValueError, match="same tasks"):
        paired(a, b[:2])
