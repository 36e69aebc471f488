"""The two inputs a reward is computed from: what the task expects, and how the episode ended.

- `GradedTask`: any object with ``.answer`` (the gold) and ``.metric`` (a name in
  `fathom.reward.metrics.METRICS`). The task layer's ``Task`` record fits it; the reward layer never
  imports the task layer.
- `EpisodeOutcome`: what the environment knows when an episode ends. Counts are programmer data and are
  validated (negative, NaN, inf or non-integer counts raise ValueError); ``answer`` is model data and may
  be anything at all, which the components simply score low.

This module computes nothing; see `fathom.reward.components` and `fathom.reward.compose`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Protocol


class GradedTask(Protocol):
    """The part of a task the reward reads: its gold answer and the metric that scores it."""

    @property
    def answer(self) -> Any: ...

    @property
    def metric(self) -> str: ...


def _check_count(name: str, value: Any, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"EpisodeOutcome.{name} must be a finite count, got {value}")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"EpisodeOutcome.{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"EpisodeOutcome.{name} must be >= 0, got {value}")


@dataclass(frozen=True)
class EpisodeOutcome:
    """How an episode ended, as the environment saw it.

    answer:    the final answer content (any JSON value), or None when nothing was set.
    answered:  True when the answer was submitted through the protocol (``FINAL(value)`` or
               ``answer["ready"] = True``); an unsubmitted draft is not graded.
    tokens:    policy tokens generated over the whole episode (all turns; not sub-LM tokens).
    llm_calls: ``llm()`` / ``llm_batch`` sub-calls made (each prompt of a batch counts once).
    turns:     policy turns taken.
    llm_chars: characters sent to sub-calls, when the environment tracks it (logged, not rewarded).
    """

    answer: Any
    answered: bool
    tokens: int
    llm_calls: int
    turns: int
    llm_chars: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.answered, bool):
            raise ValueError(f"EpisodeOutcome.answered must be a bool, got {type(self.answered).__name__}")
        _check_count("tokens", self.tokens)
        _check_count("llm_calls", self.llm_calls)
        _check_count("turns", self.turns)
        _check_count("llm_chars", self.llm_chars, optional=True)
