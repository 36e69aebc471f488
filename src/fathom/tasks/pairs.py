"""OOLONG-Pairs: every pair of users whose records satisfy a label predicate (quadratic aggregation).

Same records as `fathom.tasks.oolong` (`fathom.tasks.records`: labels must be read with `label_of`). Two
categories A and B are made rare: only a few planted users have records of them; everyone else asks
questions of the other four categories. Predicates (RLM paper App. D.1 tasks 1-3 and 11-20, chosen by seed):

- ``any``:  both users have at least one instance of A or B.
- ``both``: both users have at least one A and at least one B (near-miss users have only one of them).
- ``asym``: one user has at least two A and the other at least one B (near-miss users have exactly one A).

Questions open with "Among the 3,744 questions above (dated Jan 2, 2022 to Dec 30, 2024)" (`records.SPAN`,
checked by `validate()`), so no two documents share a question text.

Gold: sorted list of ``[lo, hi]`` user-id pairs (ints); metric ``set_f1`` (order inside a pair is free).
Pair counts stay modest: 4 to 33 by difficulty (easy / medium / hard plant more qualifying and near-miss
users). For an expert: `QUESTION_RES` gives the predicate and the two categories; count A and B per user
over `records.RECORD_RE` lines with `records.label_of`, then enumerate pairs with `pairs_for`.

This module does not write records or instances (see `fathom.tasks.records`), nor date-constrained
predicates (RLM tasks 4, 5, 7, 9, 10).
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

from fathom.tasks import records
from fathom.tasks.family import (
    Family,
    InvalidTaskError,
    alternation,
    check_difficulty,
    find_one,
    make_task,
    template_regex,
)
from fathom.tasks.haystack import Corpora, chars_for_tokens
from fathom.tasks.records import LABELS, Record
from fathom.tasks.schema import Task

NAME = "pairs"
PREDICATES = ("any", "both", "asym")
_TAIL = " Give one pair per line as (id1, id2), lower ID first, no duplicate pairs."
_HEAD = "Among " + records.SPAN + ", list all pairs of user IDs where "  # names its document
QUESTIONS = {
    "any": _HEAD + "both users have at least one instance of the category '{a}' or '{b}'." + _TAIL,
    "both": _HEAD + "both users have at least one instance of the category '{a}' and at least one instance "
    "of the category '{b}'." + _TAIL,
    "asym": _HEAD
    + "one user has at least two instances of the category '{a}' and the other user has at least "
    "one instance of the category '{b}'." + _TAIL,
}
_SLOTS = {"a": alternation(LABELS), "b": alternation(LABELS), **records.SPAN_SLOTS}
QUESTION_RES = {p: template_regex(q, _SLOTS) for p, q in QUESTIONS.items()}

# difficulty -> (qualifying users, near-miss users); for asym: (only-A users, only-B users, A-and-B users)
LEVELS = {"easy": (4, 2), "medium": (6, 4), "hard": (8, 8)}
ASYM_LEVELS = {"easy": (2, 2, 0), "medium": (3, 3, 1), "hard": (4, 4, 2)}


def qualifies(predicate: str, a: int, b: int) -> tuple[bool, bool]:
    """(can be the first user, can be the second user) of a pair, from the user's counts of A and B."""
    if predicate == "any":
        ok = a + b >= 1
        return ok, ok
    if predicate == "both":
        ok = a >= 1 and b >= 1
        return ok, ok
    return a >= 2, b >= 1


def pairs_for(predicate: str, counts: dict[int, tuple[int, int]]) -> list[list[int]]:
    """All [lo, hi] pairs of distinct users satisfying the predicate, sorted."""
    roles = {user: qualifies(predicate, a, b) for user, (a, b) in counts.items()}
    found = {
        (min(u, v), max(u, v))
        for u, v in itertools.permutations(sorted(roles), 2)
        if roles[u][0] and roles[v][1]
    }
    return [list(p) for p in sorted(found)]


def planted_labels(rng: random.Random, predicate: str, difficulty: str, a: str, b: str) -> list[list[str]]:
    """For each planted user, the rare labels of their records."""
    if predicate == "asym":
        only_a, only_b, both = ASYM_LEVELS[difficulty]
        plan = [[a] * rng.randint(2, 3) for _ in range(only_a)]
        plan += [[b] * rng.randint(1, 2) for _ in range(only_b)]
        plan += [[a, a, b] for _ in range(both)]
        return plan + [[a] for _ in range(only_a)]  # near misses: a single A
    n_ok, n_near = LEVELS[difficulty]
    if predicate == "any":
        return [[rng.choice((a, b)) for _ in range(rng.randint(1, 2))] for _ in range(n_ok)]
    plan = [[a, b] + [rng.choice((a, b))] * rng.randint(0, 1) for _ in range(n_ok)]
    return plan + [[rng.choice((a, b))] * rng.randint(1, 2) for _ in range(n_near)]


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{NAME}/{seed}")  # per-family stream: same seed, unrelated tasks
    predicate = rng.choice(PREDICATES)
    a, b = rng.sample(LABELS, 2)
    common = [label for label in LABELS if label not in (a, b)]
    plan = planted_labels(rng, predicate, difficulty, a, b)
    users = rng.sample(range(10_000, 100_000), max(2 * len(plan), length_tokens // 256))
    planted = [
        Record(rng.randrange(records.N_DAYS), user, label, records.instance(rng, label))
        for user, labels in zip(users, plan, strict=False)
        for label in labels
    ]

    def background() -> Record:
        label = rng.choice(common)
        return Record(rng.randrange(records.N_DAYS), rng.choice(users), label, records.instance(rng, label))

    planted_chars = sum(len(r.text) + 48 for r in planted)
    recs = records.fill(chars_for_tokens(length_tokens, "records") - 700 - planted_chars, background)
    recs += planted
    rng.shuffle(recs)
    tally = Counter((r.user, r.label) for r in planted)  # only planted users have A or B records
    gold = pairs_for(predicate, {u: (tally[u, a], tally[u, b]) for u in users[: len(plan)]})
    question = QUESTIONS[predicate].format(a=a, b=b, **records.span(recs))
    return make_task(
        NAME,
        seed,
        length_tokens,
        difficulty,
        question,
        gold,
        "set_f1",
        records.document(recs),
        {"predicate": predicate, "records": len(recs), "planted_users": len(plan)},
    )


def parse_question(question: str) -> tuple[str, str, str]:
    """(predicate, category A, category B) of a pairs question."""
    hits = [(p, m["a"], m["b"]) for p, pattern in QUESTION_RES.items() if (m := pattern.fullmatch(question))]
    return find_one(hits, "pair predicate")


def solve(question: str, document: str) -> list[list[int]]:
    predicate, a, b = parse_question(question)
    counts: dict[int, list[int]] = {}
    for _, user, text in records.parse(document):
        label = records.label_of(text)
        if label in (a, b):
            tally = counts.setdefault(user, [0, 0])
            tally[label == b] += 1
    return pairs_for(predicate, {u: (na, nb) for u, (na, nb) in counts.items()})


def wrong_answers(task: Task, document: str) -> list[list[list[int]]]:
    gold = [list(p) for p in task.answer]  # type: ignore[union-attr]
    if not gold:
        raise InvalidTaskError(f"{task.id}: no pairs")
    users = sorted({user for _, user, _ in records.parse(document)})
    outsider = next(list(p) for p in itertools.combinations(users, 2) if list(p) not in gold)
    return [gold[:-1], gold[1:], [*gold, outsider], gold[: len(gold) // 2], [outsider], []]


def check(task: Task, document: str) -> None:
    """Instances never name a label, and the question's record count and date span are the document's."""
    records.check_not_greppable(task, document)
    slots = [m.groupdict() for pattern in QUESTION_RES.values() if (m := pattern.fullmatch(task.question))]
    records.check_span(find_one(slots, "pair predicate"), document)


FAMILY = Family(
    NAME,
    "OOLONG-Pairs: all user pairs whose read labels satisfy a predicate",
    generate,
    solve,
    wrong_answers,
    False,
    check=check,
)
validate = FAMILY.validate
