"""Single needle in a haystack with distractor needles (RULER S-NIAH / multikey_1 style).

The haystack is a contiguous window of one corpus (chosen by the seed). Needles are paragraphs::

    One of the special magic numbers for brave-falcon is: 4817263.

Exactly one needle carries the asked key; the others are distractors whose keys look alike (they share
the adjective or the noun with it, at medium/hard) and, at hard, whose values share the first digits.

For an expert policy: every needle matches `NEEDLE_RE` (groups: key, 7-digit value) and the question
matches `QUESTION_RE` (group "key"). The answer is the one value whose key equals the asked key exactly.

Difficulty: easy 3 distractors with unrelated keys; medium 6 (3 look-alike); hard 12 (9 look-alike, values
sharing the gold's first 4 digits). Gold: the value as a string; metric ``exact``.

This module does not handle several asked keys or values (see `fathom.tasks.multikey`).
"""

from __future__ import annotations

import random
import re

from fathom.tasks.corpora import SOURCE_NAMES
from fathom.tasks.family import (
    Family,
    InvalidTaskError,
    check_difficulty,
    find_one,
    make_task,
    question_slots,
    template_regex,
)
from fathom.tasks.haystack import Corpora, haystack_with_needles
from fathom.tasks.schema import Task
from fathom.tasks.words import ADJECTIVES, NOUNS

NAME = "niah"
NEEDLE = "One of the special magic numbers for {key} is: {value}."
NEEDLE_RE = re.compile(r"One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.")
QUESTION = (
    "What is the special magic number for {key} mentioned in the provided text? "
    "Answer with the 7-digit number only."
)
KEY = r"[a-z]+-[a-z]+"
QUESTION_RE = template_regex(QUESTION, {"key": KEY})

# difficulty -> (distractors, of which look-alike keys, distractor values share the gold's prefix)
LEVELS = {"easy": (3, 0, False), "medium": (6, 3, False), "hard": (12, 9, True)}


def random_key(rng: random.Random) -> str:
    return f"{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}"


def lookalike_key(rng: random.Random, key: str) -> str:
    """A key sharing the adjective or the noun with `key` (RULER's keys are just as alike)."""
    adjective, noun = key.split("-")
    return f"{adjective}-{rng.choice(NOUNS)}" if rng.random() < 0.5 else f"{rng.choice(ADJECTIVES)}-{noun}"


def random_value(rng: random.Random, like: str | None = None) -> str:
    if like is None:
        return str(rng.randrange(1_000_000, 10_000_000))
    return like[:4] + f"{rng.randrange(1000):03d}"


def distractor_keys(rng: random.Random, keys: list[str], n: int, n_alike: int) -> list[str]:
    """`n` new keys, distinct from each other and from `keys`; `n_alike` of them look like one of `keys`."""
    taken = set(keys)
    out: list[str] = []
    while len(out) < n:
        key = lookalike_key(rng, rng.choice(keys)) if len(out) < n_alike else random_key(rng)
        if key not in taken:
            taken.add(key)
            out.append(key)
    return out


def distinct_values(rng: random.Random, n: int, taken: set[str], like: str | None = None) -> list[str]:
    out: list[str] = []
    while len(out) < n:
        value = random_value(rng, like)
        if value not in taken:
            taken.add(value)
            out.append(value)
    return out


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{NAME}/{seed}")  # per-family stream: same seed, unrelated tasks
    n_distractors, n_alike, alike_values = LEVELS[difficulty]
    source = rng.choice(SOURCE_NAMES)
    key = random_key(rng)
    (value,) = distinct_values(rng, 1, set())
    keys = distractor_keys(rng, [key], n_distractors, n_alike)
    values = distinct_values(rng, n_distractors, {value}, value if alike_values else None)
    needles = [NEEDLE.format(key=k, value=v) for k, v in zip([key, *keys], [value, *values], strict=True)]
    rng.shuffle(needles)
    document = haystack_with_needles(corpora, rng, source, length_tokens, needles, ordered=False)
    return make_task(
        NAME,
        seed,
        length_tokens,
        difficulty,
        QUESTION.format(key=key),
        value,
        "exact",
        document,
        {"source": source, "distractors": n_distractors},
    )


def solve(question: str, document: str) -> str:
    key = question_slots(QUESTION_RE, question)["key"]
    return find_one([v for k, v in NEEDLE_RE.findall(document) if k == key], f"needle for {key}")


def wrong_answers(task: Task, document: str) -> list[str]:
    gold = str(task.answer)
    if not re.fullmatch(r"\d{7}", gold):
        raise InvalidTaskError(f"{task.id}: gold {gold!r} is not a 7-digit number")
    others = [v for k, v in NEEDLE_RE.findall(document) if v != gold]
    near = gold[:-1] + str((int(gold[-1]) + 1) % 10)
    return [*others, near, gold[:-1], "", "none"]


FAMILY = Family(
    NAME, "single needle among look-alike distractor needles", generate, solve, wrong_answers, True
)
validate = FAMILY.validate
