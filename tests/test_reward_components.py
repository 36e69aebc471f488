"""Reward components in isolation: each is a pure function returning a value in [0, 1]."""

from dataclasses import dataclass
from typing import Any

import pytest

from fathom.reward.components import (
    answer_chars,
    answer_format,
    correctness,
    recursion_efficiency,
    token_budget,
)
from fathom.reward.config import RewardConfig
from fathom.reward.outcome import EpisodeOutcome

CONFIG = RewardConfig()


@dataclass(frozen=True)
class Gold:
    answer: Any
    metric: str


def submitted(answer: Any, tokens: int = 100, llm_calls: int = 0) -> EpisodeOutcome:
    return EpisodeOutcome(answer=answer, answered=True, tokens=tokens, llm_calls=llm_calls, turns=1)


# --- answer_chars --------------------------------------------------------------------------------


def test_answer_chars_measures_strings_and_json():
    assert answer_chars("abc", 10) == 3
    assert answer_chars(["a", 1], 100) == len('["a", 1]')
    assert answer_chars(42, 10) == 2
    assert answer_chars("x" * 11, 10) is None
    assert answer_chars(list(range(11)), 10) is None  # over by item count alone


def test_answer_chars_rejects_unencodable_values():
    nested: Any = []
    for _ in range(5000):
        nested = [nested]
    circular: list[Any] = []
    circular.append(circular)
    assert answer_chars(nested, 10**9) is None
    assert answer_chars(circular, 10**9) is None
    assert answer_chars({1, 2}, 100) is None
    assert answer_chars(10**5000, 10**9) is None  # past Python's int-to-str digit limit
    assert answer_chars(b"bytes", 100) is None


# --- answer_format -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "answer", "expected"),
    [
        ("exact", "blue whale", 1.0),
        ("exact", 42, 1.0),
        ("exact", "", 0.0),
        ("exact", "   \n\t", 0.0),
        ("exact", "\u200b\u200d", 0.0),  # invisible only
        ("exact", ["blue whale"], 0.0),
        ("exact", {"answer": "x"}, 0.0),
        ("numeric", "37", 1.0),
        ("numeric", 37.5, 1.0),
        ("numeric", "1,234", 1.0),
        ("numeric", "37 or 38", 0.0),
        ("numeric", "about 37", 0.0),
        ("numeric", [37], 0.0),
        ("numeric", True, 0.0),
        ("numeric", float("nan"), 0.0),
        ("set_f1", ["a", "b"], 1.0),
        ("set_f1", [[1, 2], [3, 4]], 1.0),
        ("set_f1", "(1, 2)\n(3, 4)", 1.0),
        ("set_f1", [], 0.0),
        ("set_f1", ["", " "], 0.0),
        ("set_f1", [[[1, 2]]], 0.0),
        ("set_f1", [{"a": 1}], 0.0),
        ("set_f1", [[]], 0.0),
        ("set_f1", {"a": 1}, 0.0),
    ],
)
def test_answer_format_by_metric(metric, answer, expected):
    gold = [["1", "2"]] if metric == "set_f1" else "37"
    assert answer_format(Gold(gold, metric), submitted(answer), CONFIG) == expected


def test_answer_format_never_reads_the_gold():
    for gold in ("37", "something else entirely"):
        assert answer_format(Gold(gold, "exact"), submitted("37"), CONFIG) == 1.0


def test_answer_format_requires_submission_and_size_limit():
    task = Gold("37", "exact")
    draft = EpisodeOutcome(answer="37", answered=False, tokens=10, llm_calls=0, turns=1)
    assert answer_format(task, draft, CONFIG) == 0.0
    assert answer_format(task, submitted(None), CONFIG) == 0.0
    assert answer_format(task, submitted("x" * 4096), CONFIG) == 1.0
    assert answer_format(task, submitted("x" * 4097), CONFIG) == 0.0
    assert answer_format(task, submitted("x" * 11), RewardConfig(max_answer_chars=10)) == 0.0


def test_answer_format_unknown_metric_raises():
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        answer_format(Gold("x", "bleu"), submitted("x"), CONFIG)


# --- correctness ---------------------------------------------------------------------------------


def test_correctness_uses_the_task_metric():
    assert correctness(Gold("Blue Whale", "exact"), submitted(" blue whale. "), CONFIG) == 1.0
    assert correctness(Gold(37, "numeric"), submitted("35"), CONFIG) == pytest.approx(0.5625)
    assert correctness(Gold(["a", "b"], "set_f1"), submitted(["a", "c"]), CONFIG) == pytest.approx(0.5)


def test_correctness_zero_without_submission_or_when_oversized():
    task = Gold("37", "exact")
    draft = EpisodeOutcome(answer="37", answered=False, tokens=10, llm_calls=0, turns=1)
    assert correctness(task, draft, CONFIG) == 0.0
    padded = "37" + " " * 5000  # normalises to the gold, but is over max_answer_chars
    assert correctness(task, submitted(padded), CONFIG) == 0.0
    assert correctness(task, submitted(10**5000), CONFIG) == 0.0


def test_correctness_bad_gold_is_a_programmer_error():
    with pytest.raises(ValueError, match="numeric gold"):
        correctness(Gold("many", "numeric"), submitted("3"), CONFIG)


# --- token_budget and recursion_efficiency -------------------------------------------------------


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(0, 1.0), (1024, 1.0), (1025, 1 - 1 / 7168), (4608, 0.5), (8191, 1 / 7168), (8192, 0.0), (10**9, 0.0)],
)
def test_token_budget_shape(tokens, expected):
    assert token_budget(Gold("x", "exact"), submitted("x", tokens=tokens), CONFIG) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("calls", "expected"),
    [(0, 1.0), (1, 1 - 1 / 64), (16, 0.75), (32, 0.5), (63, 1 / 64), (64, 0.0), (5000, 0.0)],
)
def test_recursion_efficiency_shape(calls, expected):
    value = recursion_efficiency(Gold("x", "exact"), submitted("x", llm_calls=calls), CONFIG)
    assert value == pytest.approx(expected)


def test_recursion_free_calls_shift_the_decay():
    config = RewardConfig(free_calls=4, max_calls=12)
    values = [
        recursion_efficiency(Gold("x", "exact"), submitted("x", llm_calls=c), config) for c in (4, 8, 12)
    ]
    assert values == pytest.approx([1.0, 0.5, 0.0])
