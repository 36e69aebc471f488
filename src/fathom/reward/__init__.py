"""The reward layer: answer metrics, reward components, and their composition into one scalar.

    from fathom.reward import EpisodeOutcome, RewardConfig, compose
    breakdown = compose(task, EpisodeOutcome(answer="42", answered=True, tokens=900, llm_calls=3, turns=2))
    breakdown.total, breakdown.to_dict()

Rewards are pure functions of (task, outcome, config); nothing here runs a model or an environment.
See REWARD_AUDIT.md at the repository root for the attacks the reward is tested against.
"""

from fathom.reward.compose import COMPONENTS, RewardBreakdown, compose, is_correct
from fathom.reward.config import RewardConfig
from fathom.reward.metrics import METRICS, score
from fathom.reward.outcome import EpisodeOutcome, GradedTask

__all__ = [
    "COMPONENTS",
    "METRICS",
    "EpisodeOutcome",
    "GradedTask",
    "RewardBreakdown",
    "RewardConfig",
    "compose",
    "is_correct",
    "score",
]
