"""Compose the reward of one episode: a pure function of (task, outcome, config).

    contributions = {
        "format":       format_weight      * answer_format                 (paid always)
        "correctness":  correctness_weight * score                         (paid always)
        "token_budget": token_weight       * token_budget        * score   (paid only when correct)
        "recursion":    recursion_weight   * recursion_efficiency * score  (paid only when correct)
    }
    raw   = sum(contributions)
    total = raw                                               if correct
          = raw * min(1, wrong_cap / (format_weight + correctness_weight))   otherwise

An answer is correct when ``score >= correct_threshold`` (1e-9 tolerance). With the defaults a correct
answer earns 0.80 to 1.10 and a wrong one at most 0.25, so no efficiency, format or partial credit can lift
a wrong answer to a right one's level (`RewardConfig` enforces ``wrong_cap < correctness_weight *
correct_threshold``).

Why the efficiency terms are bonuses paid only when correct: a penalty on every episode would teach the
policy that answering fast and wrong beats reading slowly and right; as a bonus gated on correctness it can
only rank correct episodes against each other. Scaling by the score keeps the gate meaningful when
``correct_threshold < 1``. A penalty ``-w * cost`` on correct episodes differs from this only by the
constant ``w`` on correct episodes, so the adaptive (Lagrangian) weight of the recipe maps directly onto
``token_weight``.

Why the cap scales instead of clipping: wrong answers can earn format (0.10) plus partial credit
(0.70 * 0.75 ** |error| for numeric tasks). Clipping at 0.25 would pay every numeric guess within ±5 of the
gold the same 0.25 — the near-miss ordering that partial credit exists for would vanish, and a blind
guesser near the family's typical count would collect the full cap. Scaling by
0.25 / 0.80 = 0.3125 keeps the order (off by 1 → 0.195, off by 5 → 0.083) and leaves format alone on a wrong
answer worth 0.03. ``capped`` is True when this scaling lowered the total.

Not here: the component shapes (`fathom.reward.components`), answer scoring (`fathom.reward.metrics`),
or anything about how the outcome was produced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fathom.reward.components import answer_format, correctness, recursion_efficiency, token_budget
from fathom.reward.config import SCORE_TOLERANCE, RewardConfig
from fathom.reward.metrics import METRICS
from fathom.reward.outcome import EpisodeOutcome, GradedTask

__all__ = ["COMPONENTS", "EpisodeOutcome", "GradedTask", "RewardBreakdown", "compose", "is_correct"]

# The order of RewardBreakdown.components and of every log line.
COMPONENTS = ("format", "correctness", "token_budget", "recursion")


@dataclass(frozen=True)
class RewardBreakdown:
    """The reward of one episode and where it came from.

    total:      the scalar reward, in [0, config.max_total]; at most wrong_cap unless correct.
    components: weighted contributions in `COMPONENTS` order; they sum to the total before the cap.
    score:      the raw correctness score in [0, 1] from the task's metric.
    correct:    score reached correct_threshold.
    capped:     the wrong-answer cap lowered the total.
    """

    total: float
    components: dict[str, float]
    score: float
    correct: bool
    capped: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict for logs."""
        return {
            "total": self.total,
            "score": self.score,
            "correct": self.correct,
            "capped": self.capped,
            "components": dict(self.components),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardBreakdown:
        """The inverse of `to_dict` (trace files, observations that carry the breakdown as JSON)."""
        return cls(
            total=float(data["total"]),
            components={name: float(data["components"][name]) for name in COMPONENTS},
            score=float(data["score"]),
            correct=bool(data["correct"]),
            capped=bool(data["capped"]),
        )


def is_correct(score: float, config: RewardConfig) -> bool:
    """Whether a metric score counts as a correct answer under `config`."""
    return score >= config.correct_threshold - SCORE_TOLERANCE


def compose(task: GradedTask, outcome: EpisodeOutcome, config: RewardConfig | None = None) -> RewardBreakdown:
    """The reward of one episode with its per-component breakdown. Pure; raises only on programmer error."""
    config = RewardConfig() if config is None else config
    if task.metric not in METRICS:
        raise ValueError(f"task metric {task.metric!r} is not one of {', '.join(METRICS)}")
    score = correctness(task, outcome, config)
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"metric {task.metric!r} returned {score}, outside [0, 1]")
    correct = is_correct(score, config)
    efficiency_pay = score if correct else 0.0
    components = {
        "format": config.format_weight * answer_format(task, outcome, config),
        "correctness": config.correctness_weight * score,
        "token_budget": config.token_weight * token_budget(task, outcome, config) * efficiency_pay,
        "recursion": config.recursion_weight * recursion_efficiency(task, outcome, config) * efficiency_pay,
    }
    raw = sum(components.values())
    total = raw
    if not correct:
        total = raw * min(1.0, config.wrong_cap / (config.format_weight + config.correctness_weight))
    return RewardBreakdown(
        total=total, components=components, score=score, correct=correct, capped=total < raw
    )
