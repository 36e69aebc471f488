"""`rollout.vllm_kv_cache_gib`: TRL's colocated engine gets a fixed KV cache only while the trainer is built.

vLLM is not installable on our CPU machines, so the engine class TRL would call is a recorder here: what is
checked is what reaches it and that TRL's name is restored."""

from __future__ import annotations

import pytest
import trl.generation.vllm_generation as generation

from fathom.train.config import ConfigError, RolloutSection
from fathom.train.grpo import fixed_kv_cache


def test_the_engine_gets_the_fixed_kv_cache_only_inside(monkeypatch):
    calls = []

    def engine(**kwargs):
        calls.append(kwargs)

    monkeypatch.setattr(generation, "LLM", engine, raising=False)
    with fixed_kv_cache(1.5):
        generation.LLM(model="m", gpu_memory_utilization=0.1)
    generation.LLM(model="m")
    assert calls[0] == {"model": "m", "gpu_memory_utilization": 0.1, "kv_cache_memory_bytes": 3 * 2**29}
    assert calls[1] == {"model": "m"} and generation.LLM is engine
    with fixed_kv_cache(0.0):  # 0: vLLM profiles as usual, nothing is wrapped
        assert generation.LLM is engine


def test_a_negative_kv_cache_is_refused():
    with pytest.raises(ConfigError, match="vllm_kv_cache_gib"):
        RolloutSection(vllm_kv_cache_gib=-1.0)
