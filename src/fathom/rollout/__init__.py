"""Rollouts: token-level chat format, generation backends, and the multi-episode rollout engine.

The engine (and with it the environment and its dependencies) is imported on first use, so the backends
can run on a machine that has only torch and transformers (the lent GPU).
"""

from typing import Any

from fathom.rollout.backends import Backend, Generation, HFBackend, Sampling, VLLMBackend
from fathom.rollout.chat import ChatFormat

_ENGINE = ("EngineSubLM", "Rollout", "RolloutConfig", "RolloutEngine")

__all__ = ["Backend", "ChatFormat", "Generation", "HFBackend", "Sampling", "VLLMBackend", *_ENGINE]


def __getattr__(name: str) -> Any:
    if name in _ENGINE:
        from fathom.rollout import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'fathom.rollout' has no attribute {name!r}")
