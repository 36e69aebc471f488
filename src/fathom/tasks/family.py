"""What every task family provides, and the shared check behind each family's `validate()`.

A family is a small module with four pure functions:

- ``generate(seed, length_tokens, difficulty, corpora) -> Task`` — the document inline; same arguments,
  same task, byte for byte (all randomness comes from one ``random.Random(f"{family}/{seed}")``, so two
  families given the same seed still draw unrelated tasks).
- ``solve(question, document) -> answer`` — the reference solution, computed only from the question text
  and the documented formats (needle regexes, ``label_of`` for record labels). It is what a scripted expert
  policy does, and it proves the question is answerable from the document alone.
- ``wrong_answers(task, document) -> list`` — obvious wrong answers (distractors, near misses, subsets).
- ``validate(task)`` — `check_task`: the gold scores 1.0, the reference solution scores 1.0, and every
  wrong answer scores below 1.0 (0.0 under ``exact``). Raises `InvalidTaskError` otherwise.

This module does not pick families or lengths for datasets (see `fathom.tasks.build`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fathom.reward.metrics import score
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Answer, Task

DIFFICULTIES = ("easy", "medium", "hard")
DEFAULT_DIFFICULTY = "medium"


class InvalidTaskError(ValueError):
    """A task fails its own verification: the generator (or whoever wrote the task) has a bug."""


@dataclass(frozen=True)
class Family:
    name: str
    summary: str
    generate: Callable[[int, int, str, Corpora], Task]
    solve: Callable[[str, str], Any]
    wrong_answers: Callable[[Task, str], list[Any]]
    uses_corpora: bool
    # Family-specific invariants of the document (e.g. no label name inside an instance).
    check: Callable[[Task, str], None] | None = None

    def validate(self, task: Task, document: str | None = None) -> None:
        """Raise `InvalidTaskError` unless the task verifies (see the module docstring)."""
        check_task(task, self.solve, self.wrong_answers, document, self.check)


def check_difficulty(difficulty: str) -> None:
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; known: {', '.join(DIFFICULTIES)}")


def make_task(
    family: str,
    seed: int,
    length_tokens: int,
    difficulty: str,
    question: str,
    answer: Answer,
    metric: str,
    document: str,
    meta: dict[str, Any],
) -> Task:
    return Task(
        id=f"{family}-{difficulty}-{length_tokens}-{seed}",
        family=family,
        question=question,
        answer=answer,
        metric=metric,
        length_tokens=length_tokens,
        length_chars=len(document),
        difficulty=difficulty,
        seed=seed,
        document=document,
        meta=meta,
    )


def check_task(
    task: Task,
    solve: Callable[[str, str], Any],
    wrong_answers: Callable[[Task, str], list[Any]],
    document: str | None = None,
    check: Callable[[Task, str], None] | None = None,
) -> None:
    """The shared body of every family's `validate()`; see the module docstring."""
    gold = task.answer
    if score(task.metric, gold, gold) != 1.0:
        raise InvalidTaskError(f"{task.id}: the gold answer {gold!r} does not score 1.0 against itself")
    text = task.read_document() if document is None else document
    if len(text) != task.length_chars:
        raise InvalidTaskError(f"{task.id}: length_chars {task.length_chars} != document length {len(text)}")
    if check is not None:
        check(task, text)
    solved = solve(task.question, text)
    if score(task.metric, solved, gold) != 1.0:
        raise InvalidTaskError(f"{task.id}: the reference solution {solved!r} does not match gold {gold!r}")
    for wrong in wrong_answers(task, text):
        got = score(task.metric, wrong, gold)
        if got >= 1.0 or (task.metric == "exact" and got != 0.0):
            raise InvalidTaskError(f"{task.id}: the wrong answer {wrong!r} scores {got} against {gold!r}")


def template_regex(template: str, slots: Mapping[str, str]) -> re.Pattern[str]:
    """A regex that fully matches ``template.format(...)``, with one named group per slot.

    Questions are parsed with the very templates that wrote them, so the two cannot drift apart. Slot
    patterns must not capture themselves (use ``(?:...)``).
    """
    parts = re.split(r"\{(\w+)\}", template)
    return re.compile(
        "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{slots[p]})" for i, p in enumerate(parts))
    )


def question_slots(pattern: re.Pattern[str], question: str) -> dict[str, str]:
    """The slot values of a question written from `pattern`'s template; InvalidTaskError if it is not."""
    match = pattern.fullmatch(question)
    if match is None:
        raise InvalidTaskError(f"question does not fit its template: {question!r}")
    return match.groupdict()


def alternation(words: tuple[str, ...]) -> str:
    return "(?:" + "|".join(map(re.escape, words)) + ")"


def find_one(items: list[Any], what: str) -> Any:
    """The single item of `items`; a reference solver uses it to insist the document is unambiguous."""
    if len(items) != 1:
        raise InvalidTaskError(f"expected exactly one {what}, found {len(items)}: {items[:5]!r}")
    return items[0]
