"""The lab recipe's arithmetic: curriculum, adaptive token penalty, rank bonus, and reward shaping.

Everything here is a pure function or a small state record with ``to_dict`` / ``from_dict`` (saved in every
checkpoint, so a resumed run continues with the same tier, EMA, penalty weight and temperature):

- Curriculum: an EMA of the step's mean task reward (or accuracy); the tier advances when the EMA reaches
  the threshold *and* the run has spent ``min_dwell_steps`` in the tier. A manual override (control file)
  sets the tier and restarts its dwell and EMA.
- Lagrangian penalty: ``weight <- clip(weight + lr * (accuracy - floor), min, max)`` once per step. Above
  the accuracy floor the weight on token cost grows (shorter episodes); below it the weight shrinks, so
  accuracy is held near the floor while tokens are squeezed.
- Shaping of one GRPO group: the environment's total reward, minus its fixed token bonus (the adaptive
  penalty replaces it), minus ``weight * token_cost`` on *correct* rollouts only (a wrong answer is never
  made worse for being short or long: that would teach answering fast and wrong), plus an optional
  zero-mean rank bonus by length among the group's correct rollouts (ties share the average rank).

This module neither reads files nor talks to the trainer; `fathom.train.callbacks` applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from fathom.reward.components import token_budget
from fathom.reward.config import RewardConfig
from fathom.reward.outcome import EpisodeOutcome
from fathom.train.config import CurriculumConfig, PenaltyConfig


@dataclass
class RecipeState:
    """The recipe's mutable state; identical on every rank (updates use globally reduced statistics)."""

    tier: int
    penalty_weight: float
    temperature: float
    ema: float | None = None  # None until the first step in the current tier
    steps_in_tier: int = 0
    examples_seen: int = 0  # rollouts trained on, all ranks
    model_tokens_seen: int = 0  # sampled (trained) tokens, all ranks
    tier_history: list[list[int]] = field(default_factory=list)  # [step, tier] at each change
    control_digest: str = ""  # the control file content last applied (not re-applied after a resume)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecipeState:
        return cls(**data)


def initial_state(curriculum: CurriculumConfig, penalty: PenaltyConfig, temperature: float) -> RecipeState:
    return RecipeState(
        tier=curriculum.start_tier,
        penalty_weight=penalty.init if penalty.enabled else 0.0,
        temperature=temperature,
        tier_history=[[0, curriculum.start_tier]],
    )


def set_tier(state: RecipeState, tier: int, step: int) -> None:
    """Manual override: move to `tier` and restart its dwell time and EMA."""
    state.tier, state.steps_in_tier, state.ema = tier, 0, None
    state.tier_history.append([step, tier])


def curriculum_step(state: RecipeState, value: float, config: CurriculumConfig, step: int) -> bool:
    """Fold one step's mean into the EMA; advance a tier if earned. Returns whether it advanced."""
    a = config.ema_alpha
    state.ema = value if state.ema is None else (1 - a) * state.ema + a * value
    state.steps_in_tier += 1
    last = len(config.tiers) - 1
    if (
        state.tier < last
        and state.steps_in_tier >= config.min_dwell_steps
        and state.ema >= config.advance_threshold
    ):
        set_tier(state, state.tier + 1, step)
        return True
    return False


def penalty_step(weight: float, accuracy: float, config: PenaltyConfig) -> float:
    """One dual-ascent step on the token-penalty weight, clipped to [min, max]."""
    if not config.enabled:
        return 0.0
    return min(config.max, max(config.min, weight + config.lr * (accuracy - config.accuracy_floor)))


def token_cost(model_tokens: int, reward: RewardConfig) -> float:
    """0 up to ``free_tokens`` sampled tokens, rising linearly to 1 at ``token_budget`` (the reward's shape)."""
    outcome = EpisodeOutcome(answer=None, answered=False, tokens=model_tokens, llm_calls=0, turns=0)
    return 1.0 - token_budget(None, outcome, reward)  # type: ignore[arg-type]  # the shape ignores the task


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, smallest first; tied values share the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for k in range(start, end + 1):
            ranks[order[k]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def rank_bonus(lengths: Sequence[int], weight: float) -> list[float]:
    """Zero-mean bonus in [-weight, weight]: the shortest gets the most; ties get the same; one alone gets 0."""
    n = len(lengths)
    if n < 2 or weight == 0:
        return [0.0] * n
    half = (n - 1) / 2
    return [weight * ((n + 1) / 2 - r) / half for r in average_ranks(lengths)]


@dataclass(frozen=True)
class Scored:
    """What shaping needs of one finished rollout."""

    total: float  # the environment's reward
    token_component: float  # its weighted token-budget bonus (0 unless correct)
    correct: bool
    score: float
    model_tokens: int


@dataclass(frozen=True)
class Shaped:
    reward: float
    penalty: float  # subtracted (correct rollouts only)
    rank_bonus: float
    token_cost: float


def shape_group(
    group: Sequence[Scored], weight: float, penalty: PenaltyConfig, reward: RewardConfig
) -> list[Shaped]:
    """The shaped rewards of one GRPO group (same task, consecutive rollouts)."""
    correct = [i for i, s in enumerate(group) if s.correct]
    bonus = dict(
        zip(correct, rank_bonus([group[i].model_tokens for i in correct], penalty.rank_bonus), strict=True)
    )
    out = []
    for i, s in enumerate(group):
        cost = token_cost(s.model_tokens, reward)
        base, pen = s.total, 0.0
        if penalty.enabled:
            base -= s.token_component  # the adaptive penalty replaces the fixed bonus
            pen = weight * cost * s.score if s.correct else 0.0
        extra = bonus.get(i, 0.0)
        out.append(Shaped(reward=base - pen + extra, penalty=pen, rank_bonus=extra, token_cost=cost))
    return out
