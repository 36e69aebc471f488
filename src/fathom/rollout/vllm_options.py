"""The vLLM engine options FATHOM sets, as one record, and the keyword arguments they become.

Both engines FATHOM generates with are a ``vllm.LLM``: TRL's colocated one (built inside TRL's
``VLLMGeneration``; `fathom.train.grpo.colocated_engine` lays these options over TRL's own arguments) and
the one `fathom.rollout.backends.VLLMBackend` builds for evaluation and the benchmarks. `engine_kwargs`
is the one place the options become vLLM arguments, so both get the same ones.

The options (vLLM 0.26's names):
- ``async_scheduling``: the scheduler prepares step N+1 while the GPU runs step N. vLLM's own default
  ("auto" here, no argument passed) turns it on for the single-process executors, TRL's
  ``external_launcher`` included; "on" makes vLLM refuse to start where it cannot (instead of silently
  falling back), "off" turns it off.
- ``max_num_batched_tokens``: tokens one engine step may schedule (prefill chunks plus one per decoding
  sequence). TRL fixes 4,096 for its engine; vLLM's default for ``LLM`` on an 80 GB+ GPU is 16,384.
- ``max_num_seqs``: sequences decoding at once. TRL sets per-device batch x steps per generation, which
  the policy's concurrent ``llm()`` requests can exceed (they then wait for a free slot).
- ``kv_cache_gib``: a KV cache of this size, skipping vLLM's start-up memory profile.
- ``ngram_speculative_tokens``: speculative decoding by n-gram lookup (vLLM's ``ngram`` method, no draft
  model): up to this many tokens a step are proposed from earlier text of the same sequence (its prompt and
  what it generated) that ends like the last 2-4 tokens, and the model checks them all in one forward pass.
  Rejection sampling keeps the model's own distribution, so the outputs and log-probs are the model's; what
  it can save is decode steps, where a sequence repeats text it has seen (the RLM's code copies the
  question's terms and its own earlier cells). Measured on the H200 it does not pay in GRPO: vLLM 0.26
  turns async scheduling off with it, and at temperature 1 few proposals are accepted, so generation took
  2.1x as long (bench/RESULTS.md, "N-gram speculative decoding, measured"). Off by default; for greedy runs.

Zero / "auto" means: pass nothing, the caller's (TRL's or vLLM's) value stands. This module imports no vLLM
and checks only what vLLM 0.26's ``SchedulerConfig`` would reject at start-up, so that a bad value fails
before a minute of engine start rather than after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ASYNC_SCHEDULING = ("auto", "on", "off")
# The n-gram match that proposes tokens: the last 2 to 4 tokens found earlier in the sequence (vLLM's default,
# 5 and 5, rarely matches the short repeats of code: a variable name, a call, a quoted term)
NGRAM_LOOKUP = (2, 4)


@dataclass(frozen=True)
class VLLMEngineOptions:
    async_scheduling: str = "auto"  # auto (vLLM decides: on for TRL's and our engines) | on | off
    max_num_batched_tokens: int = 0  # 0: the caller's (TRL: 4,096; vLLM's LLM on an H200: 16,384)
    max_num_seqs: int = 0  # 0: the caller's (TRL: per-device batch x steps per generation)
    kv_cache_gib: float = 0.0  # 0: vLLM profiles free memory at start-up and sizes the cache itself
    ngram_speculative_tokens: int = 0  # 0: no speculative decoding

    def __post_init__(self) -> None:
        if self.async_scheduling not in ASYNC_SCHEDULING:
            raise ValueError(
                f"async_scheduling must be one of {', '.join(ASYNC_SCHEDULING)}; got {self.async_scheduling!r}"
            )
        for name in ("max_num_batched_tokens", "max_num_seqs", "kv_cache_gib", "ngram_speculative_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: the caller's default); got {getattr(self, name)}")


def engine_kwargs(options: VLLMEngineOptions) -> dict[str, Any]:
    """The ``vllm.LLM`` keyword arguments `options` set (only those not left to the caller)."""
    out: dict[str, Any] = {}
    if options.async_scheduling != "auto":
        out["async_scheduling"] = options.async_scheduling == "on"
    if options.max_num_batched_tokens:
        out["max_num_batched_tokens"] = options.max_num_batched_tokens
    if options.max_num_seqs:
        out["max_num_seqs"] = options.max_num_seqs
    if options.kv_cache_gib:
        out["kv_cache_memory_bytes"] = int(options.kv_cache_gib * 2**30)
    if options.ngram_speculative_tokens:
        out["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": options.ngram_speculative_tokens,
            "prompt_lookup_min": NGRAM_LOOKUP[0],
            "prompt_lookup_max": NGRAM_LOOKUP[1],
        }
    return out


def merged_kwargs(base: dict[str, Any], options: VLLMEngineOptions) -> dict[str, Any]:
    """`base` (the caller's ``vllm.LLM`` arguments) with `options` laid over it, checked as vLLM 0.26 would.

    Raises ValueError where vLLM's scheduler would refuse the engine: fewer batched tokens than sequences
    (every decoding sequence needs one token a step)."""
    kwargs = {**base, **engine_kwargs(options)}
    tokens, seqs = kwargs.get("max_num_batched_tokens"), kwargs.get("max_num_seqs")
    if tokens is not None and seqs is not None and tokens < seqs:
        raise ValueError(
            f"vLLM needs max_num_batched_tokens ({tokens}) >= max_num_seqs ({seqs}): raise "
            "rollout.vllm_max_num_batched_tokens or lower rollout.vllm_max_num_seqs"
        )
    return kwargs
