"""Multi-value and multi-query needles (RULER multivalue / multiquery): the answer is a set of values.

Two variants, chosen by the seed:

- ``multivalue``: one key has several needles, each with its own value; "What are all the special magic
  numbers for K?" Gold: all of them.
- ``multiquery``: several keys are asked at once, each with one needle. Gold: all their values.

Needles use the `fathom.tasks.niah` sentence (`niah.NEEDLE_RE`: key, value), mixed with look-alike
distractor needles. For an expert: `QUESTION_RE` gives the asked keys as one string (group "keys"), and
`KEYS_RE` splits it; the answer is every value whose key is one of them.

Difficulty: easy 2 asked values and 3 distractors; medium 3 and 6 (3 look-alike); hard 4 and 10
(7 look-alike). Gold: sorted list of value strings; metric ``set_f1``.

This module only picks keys and values; the sentence, regex and haystack come from `fathom.tasks.niah`.
"""

from __future__ import annotations

import random
import re

from fathom.tasks import niah
from fathom.tasks.corpora import SOURCE_NAMES
from fathom.tasks.family import Family, check_difficulty, make_task, question_slots, template_regex
from fathom.tasks.haystack import Corpora, haystack_with_needles
from fathom.tasks.schema import Task

NAME = "multikey"
VARIANTS = ("multivalue", "multiquery")
QUESTION = (
    "What are all the special magic numbers for {keys} mentioned in the provided text? "
    "List every one of them, separated by commas."
)
KEYS_RE = re.compile(niah.KEY)
QUESTION_RE = template_regex(QUESTION, {"keys": rf"{niah.KEY}(?:(?:, | and ){niah.KEY})*"})

# difficulty -> (asked values, distractors, look-alike distractors)
LEVELS = {"easy": (2, 3, 0), "medium": (3, 6, 3), "hard": (4, 10, 7)}


def join_keys(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{NAME}/{seed}")  # per-family stream: same seed, unrelated tasks
    n_values, n_distractors, n_alike = LEVELS[difficulty]
    variant = rng.choice(VARIANTS)
    source = rng.choice(SOURCE_NAMES)
    if variant == "multivalue":
        asked = [niah.random_key(rng)]
        gold_keys = asked * n_values
    else:
        asked = niah.distractor_keys(rng, [], n_values, 0)
        gold_keys = asked
    values = niah.distinct_values(rng, n_values + n_distractors, set())
    keys = gold_keys + niah.distractor_keys(rng, asked, n_distractors, n_alike)
    needles = [niah.NEEDLE.format(key=k, value=v) for k, v in zip(keys, values, strict=True)]
    rng.shuffle(needles)
    document = haystack_with_needles(corpora, rng, source, length_tokens, needles, ordered=False)
    question = QUESTION.format(keys=join_keys(asked))
    return make_task(
        NAME,
        seed,
        length_tokens,
        difficulty,
        question,
        sorted(values[:n_values]),
        "set_f1",
        document,
        {"source": source, "variant": variant, "distractors": n_distractors},
    )


def solve(question: str, document: str) -> list[str]:
    asked = set(KEYS_RE.findall(question_slots(QUESTION_RE, question)["keys"]))
    return sorted(v for k, v in niah.NEEDLE_RE.findall(document) if k in asked)


def wrong_answers(task: Task, document: str) -> list[list[str]]:
    gold = list(task.answer)  # type: ignore[arg-type]
    others = [v for _, v in niah.NEEDLE_RE.findall(document) if v not in gold]
    return [gold[:-1], gold[1:], [*gold, *others[:1]], others, gold[:1], []]


FAMILY = Family(
    NAME, "all values of several needles (multivalue / multiquery)", generate, solve, wrong_answers, True
)
validate = FAMILY.validate
