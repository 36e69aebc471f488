"""The rollout engine: many RLM episodes at once, token-in / token-out, exactly what a trainer needs.

Each turn, the next model turn of every active episode is generated as one batch; the code cells of all
episodes then run concurrently in their own sandboxes, and their `llm()` sub-calls are batched into the
same backend (`EngineSubLM`). Per episode it returns ``prompt_ids``, ``completion_ids`` (model turns and
environment replies in the order the model saw them), ``env_mask`` (1 = sampled by the model, 0 = written
by the environment), ``logprobs`` (when the backend gives them), the reward breakdown and a full trace.

Rules kept here (TRL's multi-turn pitfalls): the prompt is rendered once and never re-rendered; sampled
ids are appended verbatim; a rollout always ends on a model token (the environment's last reply is not
appended); budgets (turns, new tokens per turn, total tokens, sub-calls via the sandbox) are enforced here,
not by the trainer. An episode that fails ends alone, with its trace and an ``error`` end reason.

This module does not compute advantages or losses; see `fathom.train`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fathom.env.environment import RLMEnvironment
from fathom.env.models import RLMAction, RLMObservation
from fathom.env.sublm import RequestBatcher, SubLMReply, SubLMRequest, render_request
from fathom.rollout.backends import Backend, Sampling
from fathom.rollout.chat import ChatFormat


@dataclass(frozen=True)
class RolloutConfig:
    max_turns: int = 8
    max_total_tokens: int = 8192  # completion side: model turns + environment replies
    sampling: Sampling = field(default_factory=Sampling)
    sub_sampling: Sampling = field(default_factory=lambda: Sampling(max_new_tokens=128, temperature=0.0))
    sub_max_input_tokens: int = 2048

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_total_tokens < 1:
            raise ValueError("max_turns and max_total_tokens must be >= 1")


@dataclass
class Rollout:
    task_id: str
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    reward: float | None = None
    breakdown: dict[str, Any] | None = None
    end_reason: str | None = None
    turns: int = 0
    trace: dict[str, Any] = field(default_factory=dict)

    def append(self, ids: list[int], model: bool, logprobs: list[float] | None = None) -> None:
        self.completion_ids += ids
        self.env_mask += [1 if model else 0] * len(ids)
        if self.logprobs is not None:
            if model and logprobs is None:
                self.logprobs = None  # the backend gives none: the trainer gets None, not fake zeros
            else:
                self.logprobs += logprobs if model and logprobs is not None else [0.0] * len(ids)


class EngineSubLM:
    """Answers `llm()` from every episode with the policy's own backend, batched across episodes."""

    def __init__(
        self,
        backend: Backend,
        chat: ChatFormat,
        sampling: Sampling,
        max_input_tokens: int,
        use_adapters: bool = True,
    ) -> None:
        """`use_adapters=False`: a PEFT policy answers sub-calls with its adapters switched off (the base
        model reads, the trained adapter only orchestrates)."""
        self.backend, self.chat, self.sampling = backend, chat, sampling
        self.max_input_tokens, self.use_adapters = max_input_tokens, use_adapters
        self._batcher: RequestBatcher[SubLMRequest, SubLMReply] = RequestBatcher(self._run)

    @property
    def batches_run(self) -> int:
        return self._batcher.batches_run

    def expect(self, callers: int) -> None:
        self._batcher.expect(callers)

    def done(self) -> None:
        self._batcher.done()

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        return await self._batcher.submit(requests)

    def _encode(self, request: SubLMRequest) -> list[int]:
        tok = self.chat.tokenizer
        chunk = tok.encode(request.chunk, add_special_tokens=False)
        room = self.max_input_tokens - len(tok.encode(request.prompt, add_special_tokens=False)) - 64
        cut = SubLMRequest(request.prompt, tok.decode(chunk[: max(0, room)]))
        return self.chat.prompt_ids("Answer briefly and exactly.", render_request(cut))

    def _generate(self, encoded: list[list[int]]) -> list[Any]:
        model = getattr(self.backend, "model", None)
        if self.use_adapters or not hasattr(model, "disable_adapter"):
            return self.backend.generate(encoded, self.sampling)
        with model.disable_adapter():
            return self.backend.generate(encoded, self.sampling)

    async def _run(self, requests: list[SubLMRequest]) -> list[SubLMReply]:
        encoded = [self._encode(r) for r in requests]
        gens = await asyncio.to_thread(self._generate, encoded)
        return [
            SubLMReply(self.chat.turn_text(g.ids).strip(), len(e), len(g.ids))
            for e, g in zip(encoded, gens, strict=True)
        ]


class RolloutEngine:
    def __init__(
        self,
        backend: Backend,
        chat: ChatFormat,
        env_factory: Callable[[], RLMEnvironment],
        config: RolloutConfig | None = None,
        sub_lm: EngineSubLM | None = None,
    ) -> None:
        """`sub_lm`: the batched sub-LM the environments' `llm()` reaches, if it is this engine's
        (`EngineSubLM`); the engine tells it which episodes may still call, so each turn's sub-calls from all
        episodes go out as one batch."""
        self.backend, self.chat, self.env_factory, self.sub_lm = backend, chat, env_factory, sub_lm
        self.config = config or RolloutConfig()
        self.generate_calls = 0

    def run_sync(self, tasks: Sequence[Any], sampling: Sampling | None = None) -> list[Rollout]:
        return asyncio.run(self.run(tasks, sampling))

    async def run(self, tasks: Sequence[Any], sampling: Sampling | None = None) -> list[Rollout]:
        """One rollout per task (pass a task several times for a GRPO group)."""
        cfg = self.config
        sampling = sampling or cfg.sampling
        if self.chat.stop_strings:
            sampling = Sampling(**{**sampling.__dict__, "stop_strings": tuple(self.chat.stop_strings)})
        envs = [self.env_factory() for _ in tasks]
        try:
            starts = await asyncio.gather(
                *(env.reset_async(task=task) for env, task in zip(envs, tasks, strict=True)),
                return_exceptions=True,
            )
            rollouts: list[Rollout] = []
            active: list[int] = []
            for i, (task, obs) in enumerate(zip(tasks, starts, strict=True)):
                if isinstance(obs, BaseException):
                    rollouts.append(self._failed(task, obs))
                    continue
                rollout = Rollout(task.id, self.chat.prompt_ids(obs.system_prompt or "", obs.text))
                rollout.trace = {
                    "task_id": task.id,
                    "system": obs.system_prompt,
                    "first": obs.text,
                    "turns": [],
                }
                rollouts.append(rollout)
                active.append(i)
            for turn in range(cfg.max_turns):
                if not active:
                    break
                active = await self._turn(envs, rollouts, active, sampling, last=turn == cfg.max_turns - 1)
            for i in active:  # turns ran out while the environment still waited for an answer
                await self._finish(envs[i], rollouts[i], "max_turns")
            return rollouts
        finally:
            await asyncio.gather(*(env.aclose() for env in envs), return_exceptions=True)

    async def _turn(
        self,
        envs: list[RLMEnvironment],
        rollouts: list[Rollout],
        active: list[int],
        sampling: Sampling,
        last: bool,
    ) -> list[int]:
        cfg = self.config
        room = {i: cfg.max_total_tokens - len(rollouts[i].completion_ids) for i in active}
        turn_sampling = Sampling(
            **{**sampling.__dict__, "max_new_tokens": min(sampling.max_new_tokens, *room.values())}
        )
        batch = [rollouts[i].prompt_ids + rollouts[i].completion_ids for i in active]
        started = time.perf_counter()
        gens = await asyncio.to_thread(self.backend.generate, batch, turn_sampling)
        self.generate_calls += 1
        gen_s = time.perf_counter() - started
        texts = {}
        for i, gen in zip(active, gens, strict=True):
            rollouts[i].append(gen.ids, model=True, logprobs=gen.logprobs)
            rollouts[i].turns += 1
            texts[i] = self.chat.turn_text(gen.ids)
        started = time.perf_counter()
        if self.sub_lm is not None:
            self.sub_lm.expect(len(active))
        results = await asyncio.gather(
            *(self._step(envs[i], texts[i], len(g.ids)) for i, g in zip(active, gens, strict=True)),
            return_exceptions=True,
        )
        env_s = time.perf_counter() - started
        still: list[int] = []
        for i, gen, obs in zip(active, gens, results, strict=True):
            rollout = rollouts[i]
            if isinstance(obs, BaseException):
                rollout.end_reason = f"error: {type(obs).__name__}: {obs}"
                rollout.trace["turns"].append({"text": texts[i], "error": rollout.end_reason})
                continue
            rollout.trace["turns"].append(
                {
                    "text": texts[i],
                    "tokens": len(gen.ids),
                    "finished": gen.finished,
                    "generate_s": gen_s,
                    "env_s": env_s,
                    "observation": obs.text,
                    **obs.model_dump(include={"cells", "subcalls", "answer", "end_reason"}),
                }
            )
            if obs.done:
                self._record_end(rollout, obs)
                continue
            suffix = self.chat.observation_ids(obs.text, gen.finished)
            if last or len(rollout.completion_ids) + len(suffix) >= self.config.max_total_tokens:
                await self._finish(envs[i], rollout, "max_turns" if last else "token_budget")
                continue
            rollout.append(suffix, model=False)
            still.append(i)
        return still

    async def _step(self, env: RLMEnvironment, text: str, num_tokens: int) -> RLMObservation:
        try:
            return await env.step_async(RLMAction(text=text, num_tokens=num_tokens))
        finally:  # this episode will make no more llm() calls this turn: the batch need not wait for it
            if self.sub_lm is not None:
                self.sub_lm.done()

    @staticmethod
    def _record_end(rollout: Rollout, obs: RLMObservation) -> None:
        rollout.end_reason = obs.end_reason
        rollout.reward = obs.reward if obs.reward is None else float(obs.reward)
        rollout.breakdown = obs.reward_breakdown

    async def _finish(self, env: RLMEnvironment, rollout: Rollout, reason: str) -> None:
        self._record_end(rollout, await env.finish_async(reason))

    @staticmethod
    def _failed(task: Any, exc: BaseException) -> Rollout:
        rollout = Rollout(getattr(task, "id", "?"), [], end_reason=f"error: {type(exc).__name__}: {exc}")
        rollout.trace = {"task_id": rollout.task_id, "error": rollout.end_reason, "turns": []}
        return rollout
