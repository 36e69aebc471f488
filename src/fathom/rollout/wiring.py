"""The one place that wires a run: generation service + chat format + environment + rollout engine.

Every caller — GRPO's ``rollout_func``, SFT transcript collection, ``fathom eval``, the smoke test and the
demo — builds its engine with `build_engine`, so the budgets are set once (a `RolloutConfig`; the
environment's iteration cap and token budget are derived from it, never set a second time) and a run that
works in one place works in all. `hf_service` and `vllm_service` turn a model into the generation service
the engine asks (`fathom.rollout.service`).

This module holds no state and loads no model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from fathom.env.environment import EnvConfig, RLMEnvironment
from fathom.env.sublm import SubLM
from fathom.reward.config import RewardConfig
from fathom.rollout.backends import Backend, HFBackend
from fathom.rollout.chat import ChatFormat
from fathom.rollout.engine import RolloutConfig, RolloutEngine
from fathom.rollout.episode import Episode, Turn
from fathom.rollout.service import BatchingService, GenerationService, RoutedService, VLLMService
from fathom.sandbox import SandboxConfig, SandboxPool


def env_config(
    rollout: RolloutConfig,
    reward: RewardConfig | None = None,
    sandbox: SandboxConfig | None = None,
    chunk_chars: int | None = None,
) -> EnvConfig:
    """The environment's side of `rollout`'s budgets: the same turn cap, token budget and step time limit."""
    extra: dict[str, Any] = {} if chunk_chars is None else {"chunk_chars": chunk_chars}
    return EnvConfig(
        max_iterations=rollout.max_turns,
        max_episode_tokens=rollout.max_total_tokens,
        step_timeout_s=rollout.step_timeout_s,
        max_depth=min(rollout.max_depth, 1),  # deeper recursion runs in the engine, not the environment
        sandbox=sandbox or SandboxConfig(),
        reward=reward or RewardConfig(),
        **extra,
    )


def build_engine(
    service: GenerationService,
    chat: ChatFormat,
    rollout: RolloutConfig,
    reader: SubLM | str | None,
    *,
    reward: RewardConfig | None = None,
    sandbox: SandboxConfig | None = None,
    pool: SandboxPool | None = None,
    make_env: Callable[[EnvConfig, SubLM | None], RLMEnvironment] | None = None,
    on_turn: Callable[[Episode, Turn | None], None] | None = None,
) -> RolloutEngine:
    """A rollout engine over `service`, its environments made from `rollout`'s budgets.

    `reader` answers `llm()`: an outside `SubLM`, "policy" / "base" (the engine's model with its adapter on /
    off), or None. `make_env(config, reader)` builds each environment where the caller owns them (the server's
    sandbox pool and session bookkeeping); by default a plain `RLMEnvironment` (on `pool` if given)."""
    config = env_config(rollout, reward, sandbox)

    def factory(episode_reader: SubLM | None, depth: int) -> RLMEnvironment:
        if make_env is not None and depth == 0:
            return make_env(config, episode_reader)
        return RLMEnvironment(config, sub_lm=episode_reader, pool=pool, depth=depth)

    return RolloutEngine(service, chat, factory, rollout, reader=reader, on_turn=on_turn)


def adapter_off_of(model: Any) -> Callable[[], contextlib.AbstractContextManager[Any]] | None:
    """The context that switches a PEFT model's adapter off, or None for a model without one."""
    return getattr(model, "disable_adapter", None)


def hf_service(backend: Backend, model: Any = None, max_batch: int = 1024) -> BatchingService:
    """A batch backend (HF generate, a scripted policy) as a generation service; adapter-off requests are
    served with `model`'s adapter disabled where it has one."""
    model = model if model is not None else getattr(backend, "model", None)
    return BatchingService(backend, max_batch=max_batch, adapter_off=adapter_off_of(model))


def vllm_service(llm: Any, base: GenerationService | None = None) -> VLLMService | RoutedService:
    """A vLLM engine as a generation service (run it as a context manager: ``with service.main`` / the
    returned service itself). `base`: where adapter-off `llm()` requests go (vLLM holds the merged policy)."""
    service = VLLMService(llm)
    return service if base is None else RoutedService(service, base)


@contextlib.contextmanager
def running(service: GenerationService) -> Any:
    """Starts and stops whatever driver threads `service` needs (vLLM's: the policy's engine and, where
    `llm()` goes to a second model's engine, that one's), for the duration of a run."""
    parts = (service, getattr(service, "main", None), getattr(service, "base", None))
    drivers = [s for s in parts if isinstance(s, VLLMService)]
    with contextlib.ExitStack() as stack:
        for driver in drivers:
            stack.enter_context(driver)
        yield service


def hf_policy_service(model: Any, tokenizer: Any, mode: str = "auto") -> BatchingService:
    """HF generate over `model` (the CPU path and the tests' path)."""
    return hf_service(HFBackend(model, tokenizer, mode=mode), model)
