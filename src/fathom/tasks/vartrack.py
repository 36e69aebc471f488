"""Variable tracking (RULER vt): follow chains of assignments scattered through a haystack.

Each statement is a paragraph of its own, in one of two forms (`STATEMENT_RE`: name, then a number or a
name)::

    VAR QWKRT = 48213
    VAR HBZPA = VAR QWKRT

A chain starts with a number and passes it along by name; every statement comes after the statement
that defines its source. Distractor chains carry other numbers (at hard, numbers that share the gold's
first three digits), and at hard the gold chain also branches, so the answer is a tree, not a line.

For an expert: parse every `STATEMENT_RE` match in document order, resolve names to numbers, and return
every name whose number is the one in the question (`QUESTION_RE`, group "value").

Difficulty: easy 1 chain of 3 names + 1 distractor chain; medium 5 names + 2 distractors; hard 7 names
(one branch) + 4 distractors. Gold: sorted list of names; metric ``set_f1``.

This module does not reuse a name for two assignments: "assigned the value" stays unambiguous.
"""

from __future__ import annotations

import random
import re
import string

from fathom.tasks.corpora import SOURCE_NAMES
from fathom.tasks.family import (
    Family,
    InvalidTaskError,
    check_difficulty,
    make_task,
    question_slots,
    template_regex,
)
from fathom.tasks.haystack import Corpora, haystack_with_needles
from fathom.tasks.schema import Task

NAME = "vartrack"
STATEMENT_RE = re.compile(r"^VAR ([A-Z]{5}) = (?:(\d{5})|VAR ([A-Z]{5}))$", re.MULTILINE)
QUESTION = (
    "Find all variables that are assigned the value {value} in the provided text, directly or through "
    "other variables. List every variable name, separated by commas."
)
QUESTION_RE = template_regex(QUESTION, {"value": r"\d{5}"})

# difficulty -> (names in the gold chain, distractor chains, branch the gold chain)
LEVELS = {"easy": (3, 1, False), "medium": (5, 2, False), "hard": (7, 4, True)}
DISTRACTOR_NAMES = (2, 5)  # names per distractor chain: inclusive range


def chain(rng: random.Random, names: list[str], value: str, branch: bool) -> list[tuple[str, str]]:
    """(name, source) statements for one chain: first source is the number, later ones earlier names.

    With `branch`, the second half hangs off a name in the middle instead of the previous name.
    """
    out = [(names[0], value)]
    fork = len(names) // 2
    for i, name in enumerate(names[1:], start=1):
        source = names[rng.randrange(1, fork)] if branch and i > fork else names[i - 1]
        out.append((name, source))
    return out


def statement(name: str, source: str) -> str:
    return f"VAR {name} = {source}" if source.isdigit() else f"VAR {name} = VAR {source}"


def interleave(rng: random.Random, chains: list[list[tuple[str, str]]]) -> list[tuple[str, str]]:
    """Merge chains in a random order that keeps each chain's own order."""
    queues = [list(reversed(c)) for c in chains]
    out = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        out.append(queue.pop())
    return out


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{NAME}/{seed}")  # per-family stream: same seed, unrelated tasks
    n_names, n_distractors, branch = LEVELS[difficulty]
    source = rng.choice(SOURCE_NAMES)
    sizes = [n_names] + [rng.randint(*DISTRACTOR_NAMES) for _ in range(n_distractors)]
    pool = rng.sample(range(26**5), sum(sizes))  # distinct names
    names = ["".join(string.ascii_uppercase[(n // 26**i) % 26] for i in range(5)) for n in pool]
    value = str(rng.randrange(10_000, 100_000))
    values = {value}
    while len(values) < len(sizes):
        values.add(value[:3] + f"{rng.randrange(100):02d}" if branch else str(rng.randrange(10_000, 100_000)))
    values.discard(value)
    chains, at = [], 0
    for size, chain_value in zip(sizes, [value, *sorted(values)], strict=True):
        chains.append(chain(rng, names[at : at + size], chain_value, branch and at == 0))
        at += size
    statements = [statement(n, s) for n, s in interleave(rng, chains)]
    document = haystack_with_needles(corpora, rng, source, length_tokens, statements, ordered=True)
    return make_task(
        NAME,
        seed,
        length_tokens,
        difficulty,
        QUESTION.format(value=value),
        sorted(names[:n_names]),
        "set_f1",
        document,
        {"source": source, "distractor_chains": n_distractors},
    )


def solve(question: str, document: str) -> list[str]:
    value = question_slots(QUESTION_RE, question)["value"]
    resolved: dict[str, str] = {}
    for name, number, ref in STATEMENT_RE.findall(document):
        if name in resolved:
            raise InvalidTaskError(f"variable {name} is assigned twice")
        if ref and ref not in resolved:
            raise InvalidTaskError(f"variable {ref} is used before it is assigned")
        resolved[name] = number or resolved[ref]
    return sorted(name for name, number in resolved.items() if number == value)


def wrong_answers(task: Task, document: str) -> list[list[str]]:
    gold = list(task.answer)  # type: ignore[arg-type]
    others = [name for name, *_ in STATEMENT_RE.findall(document) if name not in gold]
    return [gold[:-1], gold[:1], [*gold, others[0]], others, []]


FAMILY = Family(
    NAME, "follow assignment chains to every variable holding a value", generate, solve, wrong_answers, True
)
validate = FAMILY.validate
