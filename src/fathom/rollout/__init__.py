"""Rollouts: token-level chat format, generation backends, and the multi-episode rollout engine."""

from fathom.rollout.backends import Backend, Generation, HFBackend, Sampling, VLLMBackend
from fathom.rollout.chat import ChatFormat
from fathom.rollout.engine import EngineSubLM, Rollout, RolloutConfig, RolloutEngine

__all__ = [
    "Backend",
    "ChatFormat",
    "EngineSubLM",
    "Generation",
    "HFBackend",
    "Rollout",
    "RolloutConfig",
    "RolloutEngine",
    "Sampling",
    "VLLMBackend",
]
