"""``rollout.vllm_*`` engine options reach TRL's colocated ``vllm.LLM`` over TRL's own arguments.

vLLM is not installable on our CPU machines, so the engine class TRL would call is a recorder here; TRL's
real ``VLLMGeneration`` builds its arguments, so what is checked is what vLLM would receive from TRL 1.16
with our options laid over them, and that TRL's name is restored afterwards."""

from __future__ import annotations

import pytest
import trl.generation.vllm_generation as generation
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

from fathom.models.offline import tiny_model_dir
from fathom.rollout.vllm_options import VLLMEngineOptions, engine_kwargs, merged_kwargs
from fathom.train.config import ConfigError, RolloutSection
from fathom.train.grpo import colocated_engine


@pytest.fixture
def recorded(monkeypatch):
    """TRL's colocate path with a recording engine; TRL's environment writes are undone afterwards."""
    calls: list[dict] = []

    def engine(**kwargs):
        calls.append(kwargs)
        return object()

    monkeypatch.setattr(generation, "LLM", engine, raising=False)
    monkeypatch.setattr(generation, "is_vllm_available", lambda: True)
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    return calls, engine


def trl_engine(max_num_seqs: int) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir("tiny-smol"))
    generation.VLLMGeneration(
        model, Accelerator(cpu=True), None, mode="colocate", max_model_length=8192, max_num_seqs=max_num_seqs
    )


def test_defaults_leave_trls_arguments_and_wrap_nothing(recorded):
    calls, engine = recorded
    with colocated_engine(RolloutSection().vllm_engine()):
        assert generation.LLM is engine
        trl_engine(64)
    (kwargs,) = calls
    assert kwargs["max_num_batched_tokens"] == 4096 and kwargs["max_num_seqs"] == 64  # TRL's own
    assert "async_scheduling" not in kwargs and "kv_cache_memory_bytes" not in kwargs  # vLLM's defaults


def test_the_config_reaches_the_engine_over_trls_values(recorded):
    calls, engine = recorded
    section = RolloutSection(
        vllm_async_scheduling="on",
        vllm_max_num_batched_tokens=16384,
        vllm_max_num_seqs=192,
        vllm_kv_cache_gib=1.5,
        vllm_ngram_speculative_tokens=4,
    )
    with colocated_engine(section.vllm_engine()):
        trl_engine(64)
    trl_engine(64)  # outside: TRL's name is restored, its arguments untouched
    assert generation.LLM is engine
    ours, plain = calls
    assert ours["async_scheduling"] is True
    assert ours["max_num_batched_tokens"] == 16384 and ours["max_num_seqs"] == 192
    assert ours["kv_cache_memory_bytes"] == 3 * 2**29
    assert ours["speculative_config"] == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4,
    }  # fmt: skip
    assert ours["logprobs_mode"] == "processed_logprobs" == plain["logprobs_mode"]  # TRL's others stay
    assert plain["max_num_batched_tokens"] == 4096 and "async_scheduling" not in plain
    assert "speculative_config" not in plain


def test_async_scheduling_off_is_passed_as_false():
    assert engine_kwargs(VLLMEngineOptions(async_scheduling="off")) == {"async_scheduling": False}
    assert engine_kwargs(VLLMEngineOptions()) == {}


def test_an_engine_vllm_would_refuse_fails_before_it_starts(recorded):
    calls, _ = recorded
    # fewer batched tokens than TRL's 256 sequences: vLLM's scheduler would refuse it after loading
    with (
        colocated_engine(VLLMEngineOptions(max_num_batched_tokens=128)),
        pytest.raises(ValueError, match="256"),
    ):
        trl_engine(256)
    assert calls == []
    with pytest.raises(ValueError, match="max_num_seqs"):
        merged_kwargs({}, VLLMEngineOptions(max_num_batched_tokens=64, max_num_seqs=65))


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("vllm_kv_cache_gib", -1.0, "vllm_kv_cache_gib"),
        ("vllm_async_scheduling", "yes", "vllm_async_scheduling"),
        ("vllm_max_num_batched_tokens", -1, "vllm_max_num_batched_tokens"),
        ("vllm_max_num_seqs", -2, "vllm_max_num_seqs"),
        ("vllm_ngram_speculative_tokens", -1, "vllm_ngram_speculative_tokens"),
    ],
)
def test_bad_values_are_refused_by_name(key, value, match):
    with pytest.raises(ConfigError, match=match):
        RolloutSection(**{key: value})
    with pytest.raises(ConfigError, match="vllm_max_num_batched_tokens"):
        RolloutSection(vllm_max_num_batched_tokens=32, vllm_max_num_seqs=64)
