"""Reward audit: attacks a policy could learn against the reward; each test fails if its attack pays.

Run with ``pytest -m reward_audit`` (also part of the default run). REWARD_AUDIT.md explains every attack,
the numbers that stop it, and which test catches it. Attacks on real tasks use the task layer's
``fathom.tasks.generate_task`` / ``FAMILIES``; the rest use hand-built golds of each metric.

"Pays" has a precise meaning here: the attack never gets the correctness payout (``correct`` is False, so
the total stays at or under ``wrong_cap``), and where the attack is a whole policy its mean reward stays
at or under ``BLIND_MAX``.
"""

import math
from dataclasses import dataclass
from typing import Any

import pytest

from fathom.reward import EpisodeOutcome, RewardConfig, compose

pytestmark = pytest.mark.reward_audit

CONFIG = RewardConfig()
# Format alone on a wrong answer: 0.10 * 0.25 / 0.80.
FORMAT_ONLY = CONFIG.format_weight * CONFIG.wrong_cap / (CONFIG.format_weight + CONFIG.correctness_weight)
# A blind policy may beat format-only by at most this much on average: a policy that reads and is right
# one time in five (0.2 * 0.80 = 0.16 at least) already out-earns it. See REWARD_AUDIT.md.
BLIND_MAX = 0.15


@dataclass(frozen=True)
class Gold:
    answer: Any
    metric: str


GOLDS = {
    "exact": Gold("7294013", "exact"),
    "numeric": Gold(37, "numeric"),
    "set_f1": Gold([[12, 40], [3, 7], [18, 25]], "set_f1"),
}


def reward(task: Any, answer: Any, tokens: int = 64, llm_calls: int = 0, answered: bool = True):
    """Reward of a one-turn episode; cheap by default, which maximises any efficiency bonus on offer."""
    episode = EpisodeOutcome(answer=answer, answered=answered, tokens=tokens, llm_calls=llm_calls, turns=1)
    return compose(task, episode, CONFIG)


def assert_does_not_pay(result: Any, ceiling: float = CONFIG.wrong_cap) -> None:
    assert not result.correct
    assert result.total <= ceiling + 1e-12
    assert result.components["token_budget"] == 0.0
    assert result.components["recursion"] == 0.0


def deep_list(depth: int) -> Any:
    nested: Any = []
    for _ in range(depth):
        nested = [nested]
    return nested


# --- format only ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("metric", "answer"),
    [
        ("exact", "unknown"),
        ("exact", "answer"),
        ("exact", 0),
        ("numeric", "-100000"),  # a number far from anything: its partial credit is 0.75 ** 100037
        ("numeric", 10**9),
        ("set_f1", ["none"]),
        ("set_f1", "(0, 0)"),
    ],
)
def test_format_only_pays_at_most_format_only(metric, answer):
    result = reward(GOLDS[metric], answer)
    assert result.components["format"] == CONFIG.format_weight  # well-formed ...
    assert_does_not_pay(result, ceiling=FORMAT_ONLY)  # ... but 0.03125, not a payout
    assert result.total == pytest.approx(FORMAT_ONLY)


# --- length gaming -------------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["exact", "numeric", "set_f1"])
def test_enormous_answer_containing_the_gold_earns_nothing(metric):
    gold = GOLDS[metric].answer
    answers = [
        str(gold) + " " * CONFIG.max_answer_chars,  # normalises to the gold, but too long to be an answer
        (str(gold) + "\n") * 2000,
        [gold] * 5000,
        [gold, *["filler"] * 5000],
    ]
    for answer in answers:
        result = reward(GOLDS[metric], answer)
        assert result.total == 0.0
        assert result.score == 0.0


@pytest.mark.parametrize(
    ("metric", "answer"),
    [
        ("exact", "The answer is 7294013."),
        ("exact", "7294013 (or possibly 7294014)"),
        ("numeric", "37 records, I counted them twice"),
        ("numeric", "37.0 ± 2"),
    ],
)
def test_padding_the_gold_with_words_does_not_pay(metric, answer):
    assert_does_not_pay(reward(GOLDS[metric], answer))


def test_token_spend_never_raises_reward_and_never_rescues_a_wrong_answer():
    right, wrong = GOLDS["exact"].answer, "1111111"
    budgets = [0, 1, 1024, 2000, 4608, 8192, 10**6]
    right_totals = [reward(GOLDS["exact"], right, tokens=t).total for t in budgets]
    wrong_totals = [reward(GOLDS["exact"], wrong, tokens=t).total for t in budgets]
    assert right_totals == sorted(right_totals, reverse=True)
    assert right_totals[0] == pytest.approx(1.10) and right_totals[-1] == pytest.approx(0.95)
    assert wrong_totals == [pytest.approx(FORMAT_ONLY)] * len(
        budgets
    )  # a terse wrong answer gets no token bonus


# --- recursion spam ------------------------------------------------------------------------------


def test_recursion_spam_never_pays():
    task, right = GOLDS["exact"], GOLDS["exact"].answer
    calls = [0, 1, 8, 32, 63, 64, 1000, 10**6]
    right_totals = [reward(task, right, llm_calls=c).total for c in calls]
    assert right_totals == sorted(right_totals, reverse=True)
    assert right_totals[-1] == pytest.approx(0.95)  # correct but spamming: recursion bonus 0
    for c in calls:
        assert_does_not_pay(reward(task, "1111111", llm_calls=c), ceiling=FORMAT_ONLY)


# --- empty answers -------------------------------------------------------------------------------


@pytest.mark.parametrize("metric", ["exact", "numeric", "set_f1"])
@pytest.mark.parametrize(
    "answer", [None, "", " ", "\n\t ", "\u200b\u200c\u200d\ufeff", "\u00a0", "()", "[]", "''", [], {}, [""]]
)
def test_empty_answers_earn_zero(metric, answer):
    result = reward(GOLDS[metric], answer)
    assert result.total == 0.0
    assert result.components["format"] == 0.0


def test_unsubmitted_gold_earns_zero():
    for gold in GOLDS.values():
        assert reward(gold, gold.answer, answered=False).total == 0.0


# --- enormous and pathological answers -----------------------------------------------------------


@pytest.mark.parametrize("metric", ["exact", "numeric", "set_f1"])
def test_enormous_and_pathological_answers_score_zero_without_raising(metric):
    circular: list[Any] = []
    circular.append(circular)
    answers = [
        "x" * 10**6,
        "7" * 10**5,
        list(range(10**5)),
        {str(i): i for i in range(10**4)},
        deep_list(100_000),
        circular,
        10**5000,
        b"bytes",
        {1, 2, 3},
        float("nan"),
        float("inf"),
    ]
    for answer in answers:
        result = reward(GOLDS[metric], answer)
        assert result.total == 0.0 or (result.total <= FORMAT_ONLY + 1e-12 and not result.correct)
        assert math.isfinite(result.total)


# --- unicode and whitespace tricks ---------------------------------------------------------------

TRICKS = {
    "exact": [
        "7294\u200b013\u200b8",  # a zero-width space hiding an extra digit
        "\u202e3104927",  # bidi override: displays as the gold, is its reverse
        "7294013\u0338",  # combining long solidus overlay
        "７２９４０１３ ７２９４０１４",  # fullwidth, two candidates
        "7294013\n7294014",
        "7294013\u2028or 8812345",  # line separator
        "7294013\u00a0/\u00a07294014",
        "\u0037\u0032\u0039\u0034\u0030\u0031\u0033\u0301",  # a combining accent on the last digit
    ],
    "numeric": [
        "3\u200b7\u200b0",
        "\u202e73",
        "37\u200b 38",
        "٣٧ ٣٨",
        "３７，３８",
        "37\u0301",
        "37\u00a0±\u00a01",
    ],
    "set_f1": [
        "(12,\u200b40)(3,\u200b7)(18,\u200b25)(1,\u200b2)",  # glued pairs plus an extra
        ["(12, 40)", "(１２, ４０)", "(12\u200b, 40)", "(12, 40)\u00a0"],  # one pair four times, disguised
    ],
}
LEGIT = {
    "exact": "７２９４０１３\u200b",
    "numeric": "\u00a0３７ ",
    "set_f1": "(40,\u00a012)\n(３, 7)\n(18, 25\u200b)",
}


@pytest.mark.parametrize("metric", ["exact", "numeric", "set_f1"])
def test_unicode_and_whitespace_tricks_do_not_pay(metric):
    for trick in TRICKS[metric]:
        assert_does_not_pay(reward(GOLDS[metric], trick))
    # Normalisation still accepts honest variants of the gold, so the tricks above fail on their merits.
    assert reward(GOLDS[metric], LEGIT[metric]).correct


def test_disguised_duplicates_count_once_in_set_f1():
    result = reward(GOLDS["set_f1"], TRICKS["set_f1"][1])
    assert result.score == pytest.approx(2 * 1 / (1 + 3))  # one hit of three gold pairs: F1 0.5
