"""The rollout engine: many RLM episodes at once, token-in / token-out, one typed `Episode` each.

Every episode runs as its own coroutine: reset its environment, then for each turn ask the generation
service (`fathom.rollout.service`) for the model's turn, run it in the episode's sandbox, append the
environment's reply, and go on. Turns and `llm()` sub-calls of all live episodes reach the service as soon
as each is ready, so a continuous-batching engine (vLLM) keeps its batch full and no episode waits for the
slowest one; ``RolloutConfig.sync_turns`` restores turn-synchronous batches (every live episode's turn
generated together), which exists to measure what that costs.

`llm()` calls are answered by the reader the run was built with: an outside sub-LM (the scripted expert
reader, an OpenAI-compatible endpoint) or the engine's own model (`EngineSubLM`: the policy, or its base
weights with the adapter off). Below ``max_depth`` a sub-call is itself an RLM episode over the chunk, run
here by the same engine (the environment never runs a second episode loop).

Rules kept here (TRL's multi-turn pitfalls): the prompt is rendered once and never re-rendered; sampled ids
are appended verbatim; an episode always ends on a model token (the environment's last reply is not
appended); budgets (turns, new tokens per turn, total tokens) are enforced here. Model mistakes are data in
the episode; an exception from our own code (environment, reward, service) cancels the run and propagates.

This module does not compute advantages or losses; see `fathom.train`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fathom.env.environment import ChildTask, RLMEnvironment
from fathom.env.models import RLMAction, RLMObservation
from fathom.env.sublm import SubLM, SubLMReply, SubLMRequest, render_request
from fathom.reward.compose import RewardBreakdown
from fathom.rollout.backends import Sampling
from fathom.rollout.chat import ChatFormat
from fathom.rollout.episode import Episode, SubCall, Turn
from fathom.rollout.service import GenerationService

SUB_SYSTEM = "Answer briefly and exactly."
PROMPT_TOKENS = 256  # of a sub-call's input budget, kept for the prompt and the chat template
LOW_CHARS_PER_TOKEN = 2.0  # dense documents (tables, logs: digits are a token each in Qwen2.5)
# Who answers llm(): an outside sub-LM, or the engine's own model with the adapter on / off.
SELF_READERS = ("policy", "base")


@dataclass(frozen=True)
class RolloutConfig:
    max_turns: int = 8
    max_total_tokens: int = 8192  # completion side: model turns + environment replies
    sampling: Sampling = field(default_factory=Sampling)
    sub_sampling: Sampling = field(default_factory=lambda: Sampling(max_new_tokens=128, temperature=0.0))
    sub_max_input_tokens: int = 2048
    max_depth: int = 1  # 0: no llm(); 1: llm() is one generation; >= 2: llm() runs a child RLM episode
    context_tokens: int | None = None  # the model's window: no request may outgrow it
    sync_turns: bool = False  # turn-synchronous batches (the old behaviour; for measurement)
    step_timeout_s: float = 60.0  # one turn's cells and llm() calls together (the environment's limit)

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_total_tokens < 1:
            raise ValueError("max_turns and max_total_tokens must be >= 1")
        if self.max_depth < 0:
            raise ValueError("max_depth must be >= 0")
        if not self.step_timeout_s > 0:
            raise ValueError(f"step_timeout_s must be > 0, got {self.step_timeout_s}")


EnvFactory = Callable[[SubLM | None, int], RLMEnvironment]  # (the episode's reader, its depth) -> env


class EngineSubLM:
    """One episode's `llm()` calls, answered by the engine's own model (or, below max_depth, by a child
    RLM episode); each call is recorded on the episode with its token ids."""

    def __init__(self, engine: RolloutEngine, episode: Episode, adapter: bool) -> None:
        self.engine, self.episode, self.adapter = engine, episode, adapter

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: SubLMRequest) -> SubLMReply:
        engine, depth = self.engine, self.episode.depth + 1
        if depth < engine.config.max_depth:
            child = await engine.run_episode(ChildTask(request.prompt, request.chunk), depth=depth)
            self.episode.subcalls.extend(child.subcalls)
            answer = child.answer
            return SubLMReply("" if answer is None else str(answer), 0, child.model_tokens)
        prompt_ids = engine.sub_prompt_ids(request)
        sampling = engine.fit(engine.config.sub_sampling, len(prompt_ids))
        gen = await engine.service.generate(prompt_ids, sampling, adapter=self.adapter)
        text = engine.chat.turn_text(gen.ids).strip()
        self.episode.subcalls.append(
            SubCall(
                prompt=request.prompt,
                chunk_chars=len(request.chunk),
                reply=text,
                depth=depth,
                prompt_ids=prompt_ids,
                ids=list(gen.ids),
                logprobs=gen.logprobs,
                adapter=self.adapter,
            )
        )
        return SubLMReply(text, len(prompt_ids), len(gen.ids))


def cut_request(chat: ChatFormat, request: SubLMRequest, max_input_tokens: int) -> SubLMRequest:
    """One `llm()` call as the engine's own sub-LM is shown it, inside the sub-call's input budget: the chunk
    is cut first, then the prompt itself (a model that passes the document as the prompt gets it cut, not a
    crash). What lies past the cut is never read."""
    tok, budget = chat.tokenizer, max_input_tokens - 64
    prompt = tok.encode(request.prompt, add_special_tokens=False)[: max(0, budget)]
    chunk = tok.encode(request.chunk, add_special_tokens=False)[: max(0, budget - len(prompt))]
    return SubLMRequest(tok.decode(prompt), tok.decode(chunk))


def sub_prompt_ids(chat: ChatFormat, request: SubLMRequest, max_input_tokens: int) -> list[int]:
    """The sub-LM's prompt ids for one `llm()` call (`cut_request`). Reader-role SFT rows
    (`fathom.train.reader_sft`) are built with this same function."""
    return chat.prompt_ids(SUB_SYSTEM, render_request(cut_request(chat, request, max_input_tokens)))


def chunk_chars(max_input_tokens: int) -> int:
    """The chunk, in characters, that a reader shown `max_input_tokens` of an `llm()` call reads whole: the
    budget less `PROMPT_TOKENS` for the prompt and chat template, at `LOW_CHARS_PER_TOKEN` (dense text: tables,
    logs). Denser text (digit-heavy JSON lines: ~1.2 characters a Qwen2.5 token) is shown cut. The
    environment's stated limit, 16,000 characters, is ~3.7K-8K tokens of text."""
    return max(1, int((max_input_tokens - PROMPT_TOKENS) * LOW_CHARS_PER_TOKEN))


class _TurnBarrier:
    """Holds each live episode before its next turn until every live episode is there (sync_turns)."""

    def __init__(self, live: int) -> None:
        self.live, self.arrived = live, 0
        self._release = asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        release = self._release
        self._check()
        await release.wait()

    def leave(self) -> None:
        self.live -= 1
        self._check()

    def _check(self) -> None:
        if self.live and self.arrived >= self.live:
            self._release.set()
            self._release, self.arrived = asyncio.Event(), 0


class RolloutEngine:
    def __init__(
        self,
        service: GenerationService,
        chat: ChatFormat,
        env_factory: EnvFactory,
        config: RolloutConfig | None = None,
        reader: SubLM | str | None = None,
        on_turn: Callable[[Episode, Turn | None], None] | None = None,
    ) -> None:
        """`reader`: who answers `llm()` — an outside `SubLM`, "policy" / "base" (this engine's model with its
        adapter on / off), or None (no sub-calls). `on_turn(episode, turn)` is called when an episode has
        started (turn None) and after each of its turns (the demo streams them)."""
        if isinstance(reader, str) and reader not in SELF_READERS:
            raise ValueError(f"reader must be a SubLM, one of {SELF_READERS} or None, got {reader!r}")
        self.service, self.chat, self.env_factory = service, chat, env_factory
        self.config = config or RolloutConfig()
        self.reader, self.on_turn = reader, on_turn
        self._barrier: _TurnBarrier | None = None

    # ---- public API ----------------------------------------------------------------------------
    def run_sync(self, tasks: Sequence[Any], sampling: Sampling | None = None) -> list[Episode]:
        return asyncio.run(self.run(tasks, sampling))

    async def run(self, tasks: Sequence[Any], sampling: Sampling | None = None) -> list[Episode]:
        """One episode per task, in task order (pass a task several times for a GRPO group)."""
        sampling = sampling or self.config.sampling
        self._barrier = _TurnBarrier(len(tasks)) if self.config.sync_turns else None
        try:
            async with asyncio.TaskGroup() as group:
                runs = [group.create_task(self.run_episode(t, sampling=sampling)) for t in tasks]
        except BaseExceptionGroup as failed:  # our own error: the first one, whole, not a wrapped group
            raise failed.exceptions[0] from None
        finally:
            self._barrier = None
        return [r.result() for r in runs]

    # ---- one episode ---------------------------------------------------------------------------
    async def run_episode(self, task: Any, sampling: Sampling | None = None, depth: int = 0) -> Episode:
        cfg = self.config
        if depth == 0:
            sampling = sampling or cfg.sampling
        else:  # a child episode (llm() below max_depth) samples like a sub-call, turns of its own size
            sampling = replace(cfg.sub_sampling, max_new_tokens=cfg.sampling.max_new_tokens)
        if self.chat.stop_strings:
            sampling = replace(sampling, stop_strings=tuple(self.chat.stop_strings))
        barrier = self._barrier if depth == 0 else None
        episode = Episode(getattr(task, "id", "?"), [], depth=depth)
        reader = self._reader_for(episode)
        env = self.env_factory(reader, depth)
        try:
            obs = await env.reset_async(task=task)
            episode.system, episode.first = obs.system_prompt or "", obs.text
            episode.prompt_ids = self.chat.prompt_ids(episode.system, obs.text)
            if self.on_turn is not None:
                self.on_turn(episode, None)
            budget = cfg.max_total_tokens  # completion side; the model's window ends an episode the same way
            if cfg.context_tokens is not None:
                budget = min(budget, cfg.context_tokens - len(episode.prompt_ids))
            for turn_index in range(cfg.max_turns):
                room = budget - episode.length
                if room <= 0:
                    await self._finish(env, episode, "token_budget")
                    break
                if barrier is not None:
                    await barrier.wait()
                turn_sampling = self.fit(
                    replace(sampling, max_new_tokens=min(sampling.max_new_tokens, room)),
                    len(episode.prompt_ids) + episode.length,
                )
                started = time.perf_counter()
                gen = await self.service.generate(episode.prompt_ids + episode.completion_ids, turn_sampling)
                text = self.chat.turn_text(gen.ids)
                turn = Turn(text, list(gen.ids), gen.logprobs, gen.finished)
                turn.generate_s = time.perf_counter() - started
                started = time.perf_counter()
                obs = await env.step_async(RLMAction(text=text, num_tokens=len(gen.ids)))
                turn.env_s = time.perf_counter() - started
                turn.observation, turn.cells, turn.subcalls = obs.text, obs.cells, obs.subcalls
                turn.answer, turn.end_reason = obs.answer, obs.end_reason
                episode.turns.append(turn)
                if obs.done:
                    self._record_end(episode, obs)
                elif turn_index == cfg.max_turns - 1:
                    await self._finish(env, episode, "max_turns")
                else:
                    suffix = self.chat.observation_ids(obs.text, gen.finished)
                    if episode.length + len(suffix) >= budget:
                        await self._finish(env, episode, "token_budget")
                    else:
                        turn.observation_ids = suffix
                if self.on_turn is not None:
                    self.on_turn(episode, turn)
                if episode.end_reason is not None:
                    break
            return episode
        finally:
            if barrier is not None:
                barrier.leave()
            await env.aclose()

    # ---- helpers -------------------------------------------------------------------------------
    def _reader_for(self, episode: Episode) -> SubLM | None:
        if self.config.max_depth == 0 or self.reader is None:
            return None
        if isinstance(self.reader, str):
            return EngineSubLM(self, episode, adapter=self.reader == "policy")
        return self.reader

    def sub_prompt_ids(self, request: SubLMRequest) -> list[int]:
        return sub_prompt_ids(self.chat, request, self.config.sub_max_input_tokens)

    def fit(self, sampling: Sampling, prompt_len: int) -> Sampling:
        """`sampling` with its new tokens cut so that prompt + completion stay inside the model's window."""
        window = self.config.context_tokens
        if window is None:
            return sampling
        room = window - prompt_len
        if room < 1:
            raise ValueError(f"a {prompt_len}-token request leaves no room in the {window}-token window")
        return replace(sampling, max_new_tokens=min(sampling.max_new_tokens, room))

    @staticmethod
    def _record_end(episode: Episode, obs: RLMObservation) -> None:
        episode.end_reason = obs.end_reason
        b = obs.reward_breakdown
        episode.reward = None if b is None else RewardBreakdown.from_dict(b)

    async def _finish(self, env: RLMEnvironment, episode: Episode, reason: str) -> None:
        self._record_end(episode, await env.finish_async(reason))
