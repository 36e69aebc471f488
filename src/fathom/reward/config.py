"""Reward configuration: the weights and shapes of every reward component, validated once.

`RewardConfig` is a frozen dataclass; build it directly, or from a TOML section with
`RewardConfig.from_dict`, which rejects unknown keys. The defaults and why:

- Weights: format 0.10, correctness 0.70, token_budget 0.15, recursion 0.15 (``max_total`` = 1.10).
- ``wrong_cap`` 0.25: a wrong answer never earns more; see `fathom.reward.compose` for how the cap is
  applied (by scaling, not clipping, so partial credit keeps its order under the cap).
- ``correct_threshold`` 1.0: an answer is correct when its metric score reaches this (with a 1e-9 float
  tolerance), so set-F1 answers must match the gold set exactly and numeric answers must hit the number.
- Token budget: the first ``free_tokens`` (1024) policy tokens of an episode cost nothing; the bonus then
  falls linearly to 0 at ``token_budget`` (8192). 1024 tokens covers a few REPL turns of chunk-and-query
  code; 8192 is where an episode has clearly stopped converging.
- Recursion: the first ``free_calls`` (0) ``llm()`` calls cost nothing; the bonus falls linearly to 0 at
  ``max_calls`` (64), about one call per 4K-token chunk of a 256K-token document. Curriculum tiers with
  longer documents should raise it.
- ``max_answer_chars`` 4096: a longer answer (as text or JSON) is malformed and scores 0 everywhere; no
  task's gold comes near it, and it bounds the work the verifier does on model data.

This module holds no reward logic; see `fathom.reward.components` and `fathom.reward.compose`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

# Scores are floats (numeric partial credit is 0.75 ** d); "reaches the threshold" allows this much rounding.
SCORE_TOLERANCE = 1e-9

_FLOAT_FIELDS = (
    "format_weight",
    "correctness_weight",
    "token_weight",
    "recursion_weight",
    "wrong_cap",
    "correct_threshold",
)
_INT_FIELDS = ("free_tokens", "token_budget", "free_calls", "max_calls", "max_answer_chars")


@dataclass(frozen=True)
class RewardConfig:
    """Weights and shapes of the reward. All values are validated on construction."""

    format_weight: float = 0.10  # soft bonus for a well-formed final answer
    correctness_weight: float = 0.70  # times the task metric's score in [0, 1]
    token_weight: float = 0.15  # token-efficiency bonus, paid only when correct
    recursion_weight: float = 0.15  # llm()-call efficiency bonus, paid only when correct
    wrong_cap: float = 0.25  # the most a wrong answer can earn
    correct_threshold: float = 1.0  # metric score at/above which an answer counts as correct
    free_tokens: int = 1024  # policy tokens per episode that cost nothing
    token_budget: int = 8192  # token bonus reaches 0 here
    free_calls: int = 0  # llm() calls per episode that cost nothing
    max_calls: int = 64  # recursion bonus reaches 0 here
    max_answer_chars: int = 4096  # a longer answer is malformed: format 0 and correctness 0

    def __post_init__(self) -> None:
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"RewardConfig.{name} must be a number, got {type(value).__name__}")
            if not math.isfinite(value):
                raise ValueError(f"RewardConfig.{name} must be finite, got {value}")
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"RewardConfig.{name} must be an int, got {type(value).__name__}")
            if value < 0:
                raise ValueError(f"RewardConfig.{name} must be >= 0, got {value}")
        for name in ("format_weight", "correctness_weight", "token_weight", "recursion_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"RewardConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.correctness_weight == 0:
            raise ValueError("RewardConfig.correctness_weight must be > 0: nothing would pay for being right")
        if not 0 < self.correct_threshold <= 1:
            raise ValueError(
                f"RewardConfig.correct_threshold must be in (0, 1], got {self.correct_threshold}"
            )
        if not 0 <= self.wrong_cap <= 1:
            raise ValueError(f"RewardConfig.wrong_cap must be in [0, 1], got {self.wrong_cap}")
        # A wrong answer must never outscore the least a correct answer earns.
        least_correct = self.correctness_weight * self.correct_threshold
        if self.wrong_cap >= least_correct:
            raise ValueError(
                f"RewardConfig.wrong_cap ({self.wrong_cap}) must be below the least a correct answer earns "
                f"(correctness_weight * correct_threshold = {least_correct})"
            )
        if self.token_budget <= self.free_tokens:
            raise ValueError(
                f"RewardConfig.token_budget ({self.token_budget}) must be greater than "
                f"free_tokens ({self.free_tokens})"
            )
        if self.max_calls <= self.free_calls:
            raise ValueError(
                f"RewardConfig.max_calls ({self.max_calls}) must be greater than "
                f"free_calls ({self.free_calls})"
            )
        if self.max_answer_chars < 1:
            raise ValueError(f"RewardConfig.max_answer_chars must be >= 1, got {self.max_answer_chars}")

    @property
    def max_total(self) -> float:
        """The largest reward any episode can earn (every component at full value)."""
        return self.format_weight + self.correctness_weight + self.token_weight + self.recursion_weight

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RewardConfig:
        """Build from a mapping (a TOML section); unknown keys raise ValueError naming the valid ones."""
        valid = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(values) - set(valid))
        if unknown:
            raise ValueError(
                f"unknown reward config key(s) {', '.join(unknown)}; valid keys: {', '.join(valid)}"
            )
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field, for saving the resolved config with a run."""
        return dataclasses.asdict(self)
