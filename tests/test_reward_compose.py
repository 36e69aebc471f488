"""compose(): weights, the correctness gate on efficiency, the wrong-answer cap, and input validation."""

import json
import math
import random
from dataclasses import dataclass
from typing import Any

import pytest

from fathom.reward import COMPONENTS, EpisodeOutcome, RewardConfig, compose, is_correct

CONFIG = RewardConfig()
WRONG_SCALE = 0.25 / 0.80  # wrong_cap / (format_weight + correctness_weight)


@dataclass(frozen=True)
class Gold:
    answer: Any
    metric: str


def outcome(answer: Any, tokens: int = 500, llm_calls: int = 0, answered: bool = True) -> EpisodeOutcome:
    return EpisodeOutcome(answer=answer, answered=answered, tokens=tokens, llm_calls=llm_calls, turns=2)


def test_correct_and_efficient_earns_the_maximum():
    result = compose(Gold("42", "exact"), outcome("42"))
    assert result.correct and not result.capped
    assert result.score == 1.0
    assert result.components == pytest.approx(
        {"format": 0.10, "correctness": 0.70, "token_budget": 0.15, "recursion": 0.15}
    )
    assert result.total == pytest.approx(1.10)
    assert tuple(result.components) == COMPONENTS


def test_correct_but_costly_earns_less_but_more_than_any_wrong_answer():
    # 4608 tokens is half-way through the budget, 32 calls half-way to max_calls.
    result = compose(Gold("42", "exact"), outcome("42", tokens=4608, llm_calls=32))
    assert result.components["token_budget"] == pytest.approx(0.075)
    assert result.components["recursion"] == pytest.approx(0.075)
    assert result.total == pytest.approx(0.95)
    spent = compose(Gold("42", "exact"), outcome("42", tokens=10**7, llm_calls=10**6))
    assert spent.total == pytest.approx(0.80)
    assert spent.total > CONFIG.wrong_cap


def test_wrong_answer_gets_no_efficiency_and_is_scaled_under_the_cap():
    result = compose(Gold("42", "exact"), outcome("41", tokens=0, llm_calls=0))
    assert not result.correct and result.capped
    assert result.components == pytest.approx(
        {"format": 0.10, "correctness": 0.0, "token_budget": 0.0, "recursion": 0.0}
    )
    assert result.total == pytest.approx(0.10 * WRONG_SCALE)  # format alone: 0.03125


def test_numeric_partial_credit_keeps_its_order_under_the_cap():
    totals = [compose(Gold(37, "numeric"), outcome(str(37 + d))).total for d in (1, 2, 5, 10, 40)]
    assert totals == sorted(totals, reverse=True)
    assert totals[0] == pytest.approx((0.10 + 0.70 * 0.75) * WRONG_SCALE)  # 0.1953
    assert totals[2] == pytest.approx((0.10 + 0.70 * 0.75**5) * WRONG_SCALE)  # 0.0832
    assert all(t < CONFIG.wrong_cap for t in totals)


def test_set_f1_partial_is_wrong_and_capped():
    result = compose(Gold([[1, 2], [3, 4]], "set_f1"), outcome([[1, 2]]))
    assert result.score == pytest.approx(2 / 3)
    assert not result.correct
    assert result.total == pytest.approx((0.10 + 0.70 * 2 / 3) * WRONG_SCALE)


def test_lower_threshold_pays_efficiency_in_proportion_to_score():
    config = RewardConfig(correct_threshold=0.8, wrong_cap=0.2)
    gold = Gold(["a", "b", "c", "d", "e"], "set_f1")
    result = compose(gold, outcome(["a", "b", "c", "d"]), config)  # F1 = 8/9
    assert result.correct
    assert result.components["token_budget"] == pytest.approx(0.15 * 8 / 9)
    assert result.total == pytest.approx(0.10 + (0.70 + 0.30) * 8 / 9)


def test_unsubmitted_answer_earns_nothing_even_if_right():
    result = compose(Gold("42", "exact"), outcome("42", answered=False))
    assert result.total == 0.0
    assert result.score == 0.0
    assert not result.correct


def test_weights_come_from_config():
    config = RewardConfig(format_weight=0.0, correctness_weight=1.0, token_weight=0.0, recursion_weight=0.5)
    result = compose(Gold("42", "exact"), outcome("42", llm_calls=16), config)
    assert result.components == pytest.approx(
        {"format": 0.0, "correctness": 1.0, "token_budget": 0.0, "recursion": 0.375}
    )
    assert result.total == pytest.approx(1.375)


def test_to_dict_is_json_ready():
    data = compose(Gold("42", "exact"), outcome("41")).to_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {"total", "score", "correct", "capped", "components"}
    assert list(data["components"]) == list(COMPONENTS)


def test_is_correct_tolerance():
    assert is_correct(1.0 - 1e-12, CONFIG)
    assert not is_correct(1.0 - 1e-6, CONFIG)
    # 42.0000001 is not 42: numeric partial credit 0.75 ** 1e-7 stays below the threshold.
    assert not compose(Gold(42, "numeric"), outcome("42.0000001")).correct


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tokens": -1}, "tokens must be >= 0"),
        ({"llm_calls": -3}, "llm_calls must be >= 0"),
        ({"turns": float("nan")}, "turns must be a finite count"),
        ({"tokens": float("inf")}, "tokens must be a finite count"),
        ({"tokens": 12.5}, "tokens must be an integer"),
        ({"llm_calls": True}, "llm_calls must be an integer"),
        ({"llm_chars": -1}, "llm_chars must be >= 0"),
        ({"answered": 1}, "answered must be a bool"),
    ],
)
def test_bad_outcome_counts_raise(fields, message):
    base = {"answer": "x", "answered": True, "tokens": 10, "llm_calls": 0, "turns": 1}
    with pytest.raises(ValueError, match=message):
        EpisodeOutcome(**{**base, **fields})


def test_unknown_metric_raises_even_without_an_answer():
    with pytest.raises(ValueError, match="task metric 'rouge'"):
        compose(Gold("x", "rouge"), outcome(None, answered=False))


# --- properties over random inputs (fixed seeds) -------------------------------------------------


def random_answer(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False, 0, -7, 10**30, 3.5, float("nan"), float("inf"), -0.0])
    if kind == 2:
        return str(rng.randrange(-50, 100))
    if kind == 3:
        alphabet = "ab 42,;()[]\n\u200b\u00a0\uff14\u2212\u202e\"'"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
    if kind == 4:
        return "x" * rng.choice([0, 1, 4096, 4097, 20000])
    if kind == 5:
        return rng.choice(["a", "b", "42", "(1, 2)", "[3, 4]", '["a", "b"]'])
    if kind == 6:
        return [random_answer(rng, depth + 1) for _ in range(rng.randrange(0, 6))]
    if kind == 7:
        return {str(rng.randrange(5)): random_answer(rng, depth + 1) for _ in range(rng.randrange(0, 3))}
    return [[rng.randrange(5), rng.randrange(5)] for _ in range(rng.randrange(0, 6))]


GOLDS = [
    Gold("a", "exact"),
    Gold("42", "exact"),
    Gold(42, "numeric"),
    Gold("3", "numeric"),
    Gold(["a", "b"], "set_f1"),
    Gold([[1, 2], [3, 4]], "set_f1"),
]


def random_config(rng: random.Random) -> RewardConfig:
    correctness_weight = rng.uniform(0.1, 1.0)
    threshold = rng.uniform(0.5, 1.0)
    free_tokens, free_calls = rng.randrange(0, 2000), rng.randrange(0, 8)
    return RewardConfig(
        format_weight=rng.uniform(0, 0.3),
        correctness_weight=correctness_weight,
        token_weight=rng.uniform(0, 0.5),
        recursion_weight=rng.uniform(0, 0.5),
        wrong_cap=rng.uniform(0, 0.99) * correctness_weight * threshold,
        correct_threshold=threshold,
        free_tokens=free_tokens,
        token_budget=free_tokens + rng.randrange(1, 10000),
        free_calls=free_calls,
        max_calls=free_calls + rng.randrange(1, 100),
    )


@pytest.mark.reward_audit
@pytest.mark.parametrize("seed", range(5))
def test_property_total_in_range_and_wrong_never_exceeds_cap(seed):
    rng = random.Random(seed)
    for i in range(400):
        config = CONFIG if i % 2 else random_config(rng)
        task = rng.choice(GOLDS)
        episode = EpisodeOutcome(
            answer=rng.choice([random_answer(rng), task.answer]),
            answered=rng.random() < 0.9,
            tokens=rng.choice([0, rng.randrange(20000), 10**9]),
            llm_calls=rng.choice([0, rng.randrange(200)]),
            turns=rng.randrange(1, 30),
        )
        result = compose(task, episode, config)
        assert 0.0 <= result.total <= config.max_total + 1e-12
        raw = math.fsum(result.components.values())
        assert result.total <= raw + 1e-12
        if not result.capped:
            assert result.total == pytest.approx(raw)
        assert 0.0 <= result.score <= 1.0
        if not result.correct:
            assert result.total <= config.wrong_cap + 1e-12
            assert result.components["token_budget"] == 0.0 == result.components["recursion"]
        else:
            assert result.total >= config.correctness_weight * config.correct_threshold - 1e-9


@pytest.mark.reward_audit
@pytest.mark.parametrize("seed", range(3))
def test_property_more_tokens_or_calls_never_pays_more(seed):
    rng = random.Random(100 + seed)
    for _ in range(200):
        task = rng.choice(GOLDS)
        answer = rng.choice([task.answer, random_answer(rng)])
        tokens, calls = rng.randrange(10000), rng.randrange(100)
        base = compose(task, outcome(answer, tokens=tokens, llm_calls=calls)).total
        more_tokens = compose(task, outcome(answer, tokens=tokens + rng.randrange(1, 5000), llm_calls=calls))
        more_calls = compose(task, outcome(answer, tokens=tokens, llm_calls=calls + rng.randrange(1, 50)))
        assert more_tokens.total <= base + 1e-12
        assert more_calls.total <= base + 1e-12


def test_compose_is_deterministic():
    task, episode = Gold([[1, 2], [3, 4]], "set_f1"), outcome("(2, 1)\n(5, 6)", tokens=3000, llm_calls=9)
    assert compose(task, episode) == compose(task, episode)
