"""Rollouts: token-level chat format, generation backends and services, and the multi-episode rollout engine.

The engine (and with it the environment and its dependencies) is imported on first use, so the backends
can run on a machine that has only torch and transformers (the lent GPU).
"""

from typing import Any

from fathom.rollout.backends import Backend, Generation, HFBackend, Sampling, VLLMBackend
from fathom.rollout.chat import ChatFormat

_LAZY = {
    "EngineSubLM": "engine",
    "RolloutConfig": "engine",
    "RolloutEngine": "engine",
    "Episode": "episode",
    "Turn": "episode",
    "SubCall": "episode",
    "build_engine": "wiring",
    "hf_service": "wiring",
    "vllm_service": "wiring",
    "running": "wiring",
    "BatchingService": "service",
    "VLLMService": "service",
}

__all__ = ["Backend", "ChatFormat", "Generation", "HFBackend", "Sampling", "VLLMBackend", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"fathom.rollout.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'fathom.rollout' has no attribute {name!r}")
