"""KeyChain (LoongRL style): follow a chain of key pointers, scattered out of order, to a hidden code.

Links are paragraphs of their own, in random document order (`LINK_RE`: key, then the next key or the
final 7-digit code)::

    The drawer opened by key 3f9a07c2 holds key 81be44d0.
    The drawer opened by key 81be44d0 holds the code 5520931.

The question gives the first key. Distractor chains lead to other codes and share no key with the true
chain; at hard their first keys share the asked key's first four hex digits, so a lazy prefix match
lands on a wrong chain.

For an expert: build a dict from `LINK_RE` matches and follow it from the key in `QUESTION_RE` (group
"key"); the chain is acyclic and every key opens exactly one drawer.

Difficulty: easy 2 hops + 2 distractor chains, medium 4 + 4, hard 8 + 8. Gold: the code as a string;
metric ``exact``.

This module does not hide a question behind the chain (LoongRL's full KeyChain); the chain ends in a code.
"""

from __future__ import annotations

import itertools
import random
import re

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
from fathom.tasks.niah import distinct_values
from fathom.tasks.schema import Task

NAME = "keychain"
LINK_RE = re.compile(r"The drawer opened by key ([0-9a-f]{8}) holds (?:key ([0-9a-f]{8})|the code (\d{7}))\.")
QUESTION = (
    "Start with key {key}. Each drawer in the text holds either another key or a code. Follow the keys "
    "until you reach a code. What is that code? Answer with the 7-digit code only."
)
QUESTION_RE = template_regex(QUESTION, {"key": "[0-9a-f]{8}"})
# difficulty -> (hops in the true chain, distractor chains, distractor first keys share the asked prefix)
LEVELS = {"easy": (2, 2, False), "medium": (4, 4, False), "hard": (8, 8, True)}


def new_keys(rng: random.Random, n: int, taken: set[str], prefix: str = "") -> list[str]:
    out: list[str] = []
    while len(out) < n:
        key = prefix + f"{rng.getrandbits(32):08x}"[len(prefix) :]
        if key not in taken:
            taken.add(key)
            out.append(key)
    return out


def links(keys: list[str], code: str) -> list[str]:
    out = [f"The drawer opened by key {a} holds key {b}." for a, b in itertools.pairwise(keys)]
    return [*out, f"The drawer opened by key {keys[-1]} holds the code {code}."]


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{NAME}/{seed}")  # per-family stream: same seed, unrelated tasks
    hops, n_distractors, alike = LEVELS[difficulty]
    source = rng.choice(SOURCE_NAMES)
    taken: set[str] = set()
    chain = new_keys(rng, hops, taken)
    codes = distinct_values(rng, 1 + n_distractors, set())
    needles = links(chain, codes[0])
    for code in codes[1:]:
        first = new_keys(rng, 1, taken, chain[0][:4] if alike else "")
        needles += links(first + new_keys(rng, rng.randint(1, hops), taken), code)
    rng.shuffle(needles)
    document = haystack_with_needles(corpora, rng, source, length_tokens, needles, ordered=False)
    return make_task(
        NAME,
        seed,
        length_tokens,
        difficulty,
        QUESTION.format(key=chain[0]),
        codes[0],
        "exact",
        document,
        {"source": source, "hops": hops, "distractor_chains": n_distractors},
    )


def solve(question: str, document: str) -> str:
    key = question_slots(QUESTION_RE, question)["key"]
    drawers: dict[str, tuple[str, str]] = {}
    for opener, next_key, code in LINK_RE.findall(document):
        if opener in drawers:
            raise InvalidTaskError(f"key {opener} opens two drawers")
        drawers[opener] = (next_key, code)
    for _ in range(len(drawers) + 1):
        next_key, code = drawers[key]
        if code:
            return code
        key = next_key
    raise InvalidTaskError("the key chain has a cycle")


def wrong_answers(task: Task, document: str) -> list[str]:
    others = [code for *_, code in LINK_RE.findall(document) if code and code != task.answer]
    return [*others, str(task.answer)[:-1], ""]


FAMILY = Family(
    NAME, "follow out-of-order key pointers to a hidden code", generate, solve, wrong_answers, True
)
validate = FAMILY.validate
