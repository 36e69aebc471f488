"""Reward audit on real generated tasks: blind (masked-context) policies, copied golds, candidate lists.

These attacks use the task layer's ``fathom.tasks.generate_task`` and ``FAMILIES``. Every attack answers
in one cheap turn (64 tokens, no ``llm()`` calls), where a lucky answer also collects every efficiency
bonus, so the numbers are worst cases.

A blind policy sees the question and, fairly, the family's training distribution: the golds of
``POOL_SIZE`` other tasks of the family (seeds disjoint from the graded ones). The synthetic attacks
(format-only, length gaming, recursion spam, empty/enormous answers, unicode tricks) are in
``test_reward_audit.py``; REWARD_AUDIT.md has the table of both.
"""

import re
import statistics
from collections import Counter
from typing import Any

import pytest

from fathom.reward import EpisodeOutcome, RewardConfig, compose
from fathom.reward.metrics import normalize_text, parse_number
from fathom.tasks import FAMILIES, Corpora, generate_task

pytestmark = pytest.mark.reward_audit

CONFIG = RewardConfig()
LENGTH = 8192
N_GRADED = 100
POOL_SIZE = 200
POOL_SEED = 100_000  # pool seeds are POOL_SEED + i, graded seeds are i: disjoint
# Mean reward a blind policy may earn per family. A policy that reads and is right one time in five
# earns at least 0.2 * 0.80 = 0.16, so every blind strategy must stay below that (REWARD_AUDIT.md).
BLIND_MAX = 0.15
# Mean reward a blind policy may earn on the tasks it gets WRONG: format alone is 0.03125; the rest is
# numeric partial credit. This is the reward's own leak; lucky exact hits are paid like any right answer.
LEAK_MAX = 0.05


def reward(task: Any, answer: Any):
    episode = EpisodeOutcome(answer=answer, answered=True, tokens=64, llm_calls=0, turns=1)
    return compose(task, episode, CONFIG)


def assert_does_not_pay(result: Any) -> None:
    assert not result.correct
    assert result.total <= CONFIG.wrong_cap


def item_key(item: Any) -> Any:
    if isinstance(item, list | tuple):
        return tuple(sorted(normalize_text(x) for x in item))
    return normalize_text(item)


def answer_key(task: Any, answer: Any) -> Any:
    """Canonical form of an answer of `task`'s kind, to tell equal answers apart from different ones."""
    if task.metric == "set_f1":
        return frozenset(item_key(x) for x in answer)
    if task.metric == "numeric":
        return parse_number(answer)
    return normalize_text(answer)


@pytest.fixture(scope="module")
def corpora() -> Corpora:
    return Corpora()


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, corpora) -> tuple[str, list[Any], list[Any]]:
    """(family name, graded tasks, prior pool of other tasks of the family)."""
    name = request.param
    graded = [generate_task(name, seed, LENGTH, corpora=corpora) for seed in range(N_GRADED)]
    pool = [generate_task(name, POOL_SEED + seed, LENGTH, corpora=corpora) for seed in range(POOL_SIZE)]
    return name, graded, pool


# --- blind policies (masked context) -------------------------------------------------------------


def prior_answers(pool: list[Any]) -> dict[str, Any]:
    """Fixed answers a blind policy can build from the family's golds alone."""
    keyed = Counter(answer_key(t, t.answer) for t in pool)
    modal_key = keyed.most_common(1)[0][0]
    answers = {"modal_gold": next(t.answer for t in pool if answer_key(t, t.answer) == modal_key)}
    values = [parse_number(t.answer) for t in pool if t.metric == "numeric"]
    if values:  # a family may mix numeric and exact questions (oolong)
        answers["median_gold"] = str(round(statistics.median(values)))
        answers["mean_gold"] = str(round(statistics.fmean(values)))
    if pool[0].metric == "set_f1":
        items = Counter(item_key(x) for t in pool for x in t.answer)
        size = round(statistics.median(len(t.answer) for t in pool))
        answers["modal_items"] = [list(k) if isinstance(k, tuple) else k for k, _ in items.most_common(size)]
    return answers


def template(question: str) -> str:
    """The question with its particulars (quoted names, capitalised names and months inside a sentence,
    numbers, hyphenated keys) blanked out."""
    question = re.sub(r"'[^']*'", "'_'", question)
    question = re.sub(r"(?<=[a-z] )[A-Z][a-z]+", "_", question)
    question = re.sub(r"\b[a-z]+-[a-z]+\b", "_-_", question)
    return re.sub(r"\d+", "#", question)


def template_answers(pool: list[Any]) -> dict[str, Any]:
    """The best fixed answer per question template: a blind policy that has learnt the question types."""
    groups: dict[str, list[Any]] = {}
    for task in pool:
        groups.setdefault(template(task.question), []).append(task)
    return {key: next(iter(prior_answers(tasks).values())) for key, tasks in groups.items()}


def question_answers(question: str) -> dict[str, Any]:
    """Answers a blind policy can lift from the question text."""
    numbers = re.findall(r"\d+(?:\.\d+)?", question)
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_-]*", question)
    return {
        "question": question,
        "first_number": numbers[0] if numbers else "0",
        "last_number": numbers[-1] if numbers else "0",
        "all_numbers": ", ".join(numbers) or "0",
        "last_word": words[-1] if words else "x",
        "longest_word": max(words, key=len) if words else "x",
    }


@pytest.fixture(scope="module")
def blind(family) -> tuple[str, dict[str, list[Any]]]:
    """(family name, strategy -> reward breakdowns over the graded tasks)."""
    name, graded, pool = family
    priors, by_template = prior_answers(pool), template_answers(pool)
    results: dict[str, list[Any]] = {}
    for i, task in enumerate(graded):
        answers = {
            **priors,
            "by_template": by_template.get(template(task.question), priors["modal_gold"]),
            "copy_other_gold": pool[i].answer,
            **question_answers(task.question),
        }
        for strategy, answer in answers.items():
            results.setdefault(strategy, []).append(reward(task, answer))
    return name, results


def test_masked_context_blind_policies_do_not_pay(blind):
    name, results = blind
    means = {strategy: statistics.fmean(r.total for r in rs) for strategy, rs in results.items()}
    worst = max(means, key=means.__getitem__)
    assert means[worst] <= BLIND_MAX, f"{name}: blind strategy {worst!r} earns {means[worst]:.3f}"


def test_masked_context_wrong_guesses_earn_almost_nothing(blind):
    name, results = blind
    for strategy, rs in results.items():
        missed = [r.total for r in rs if not r.correct]
        assert missed, f"{name}: blind strategy {strategy!r} was never wrong"
        assert statistics.fmean(missed) <= LEAK_MAX, f"{name}: {strategy!r} leaks {statistics.fmean(missed)}"
        assert max(missed) <= CONFIG.wrong_cap


def test_answering_with_the_question_does_not_pay(family):
    _, graded, _ = family
    for task in graded:
        assert_does_not_pay(reward(task, task.question))


# --- copying the gold of another task ------------------------------------------------------------


def test_copying_another_tasks_gold_does_not_pay(family, corpora):
    name, graded, pool = family
    others = [generate_task(f, POOL_SEED - 1, LENGTH, corpora=corpora) for f in FAMILIES if f != name]
    for i, task in enumerate(graded):
        copied = pool[i].answer
        result = reward(task, copied)
        # Paid only when the copied gold happens to be this task's gold too (chance: see the blind tests).
        assert result.correct == (answer_key(task, copied) == answer_key(task, task.answer))
        assert result.correct or result.total <= CONFIG.wrong_cap
        for other in others:  # another family's gold pays only where it is this task's gold too (chance,
            # as above: with 20+ families answering counts, two golds coincide now and then)
            same_shape = isinstance(other.answer, list) == isinstance(task.answer, list)
            if same_shape and answer_key(task, other.answer) == answer_key(task, task.answer):
                assert reward(task, other.answer).correct
                continue
            assert_does_not_pay(reward(task, other.answer))


# --- listing every candidate ---------------------------------------------------------------------


def shape_pattern(value: Any) -> re.Pattern[str]:
    """A regex for strings shaped like `value` (a digit for a digit, a letter for a letter)."""
    parts = [r"\d" if ch.isdigit() else "[A-Za-z]" if ch.isalpha() else re.escape(ch) for ch in str(value)]
    return re.compile(r"(?<![\w-])" + "".join(parts) + r"(?![\w-])")


def candidates(task: Any, pool: list[Any]) -> list[Any]:
    """Plausible values for `task`, its gold first: the family's wrong answers (distractors, near misses,
    labels, places), pool golds, then every gold-shaped string of the document."""
    wrong = FAMILIES[task.family].wrong_answers(task, task.document)
    if task.metric == "set_f1":
        values = [*task.answer, *(x for w in wrong for x in w), *(x for t in pool for x in t.answer)]
    else:
        values = [task.answer, *wrong, *(t.answer for t in pool)]
        values += shape_pattern(task.answer).findall(task.document)
    unique, seen = [], set()
    for value in values:
        key = item_key(value) if task.metric == "set_f1" else answer_key(task, value)
        if key not in seen and key not in ("", None):
            seen.add(key)
            unique.append(value)
    return unique


def listings(task: Any, values: list[Any]) -> list[Any]:
    """The gold plus 1, 4, or as many other candidates as fit in half of max_answer_chars, in several
    written forms (a list, and for single answers also comma-, newline- and "or"-joined text)."""
    n_gold = len(task.answer) if task.metric == "set_f1" else 1
    fitted, chars = [], 0
    for value in values:
        chars += len(str(value)) + 2
        if chars > CONFIG.max_answer_chars // 2 and len(fitted) > n_gold:
            break
        fitted.append(value)
    answers: list[Any] = []
    for extra in sorted({1, 4, len(fitted) - n_gold}):
        chosen = fitted[: n_gold + extra]
        if len(chosen) <= n_gold:
            continue
        answers += [chosen, chosen[::-1]]
        if task.metric != "set_f1":
            texts = [str(v) for v in chosen]
            answers += [", ".join(texts), "\n".join(texts), " or ".join(texts)]
    return answers


def test_listing_every_candidate_does_not_get_the_correctness_payout(family):
    name, graded, pool = family
    attacked = 0
    for task in graded:
        answers = listings(task, candidates(task, pool))
        attacked += bool(answers)
        for answer in answers:
            result = reward(task, answer)
            assert not result.correct, f"{name}: listing {answer!r:.200} was graded correct"
            assert result.total <= CONFIG.wrong_cap
            if task.metric == "set_f1":
                # Every gold item listed plus at least one extra: F1 <= 2|G| / (|P| + |G|) < 1.
                n_gold, n_listed = len(task.answer), len(answer)
                assert result.score <= 2 * n_gold / (n_listed + n_gold) + 1e-9
    assert attacked == len(graded)  # every task had at least one other candidate to list
