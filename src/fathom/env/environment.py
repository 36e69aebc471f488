"""The RLM environment: one task, one sandboxed REPL, one reward — on OpenEnv's `Environment` contract.

`reset(task)` starts a jailed worker with the task's document bound read-only as `ctx` and returns the
first observation (system prompt, question, document size — never the document). `step(action)` runs the
```repl blocks of the model's turn in order, all within the step's wall-clock limit (`step_timeout_s`: the
cell running at the limit is interrupted, later blocks are not run), and returns what the model sees next.
Closing the environment interrupts a running step, which then ends the episode with end_reason "closed". The episode ends when an
answer is submitted through the REPL protocol, at the iteration cap, or when the episode's token budget is
spent; the final observation carries the reward and its breakdown (`fathom.reward.compose`).

Sub-calls: `llm()` inside the REPL reaches the sub-LM service given at construction, through a per-episode
handler that counts calls, characters and time. What answers it is the service's business: the rollout
engine's own sub-LM runs a child RLM episode over the chunk (a `ChildTask`, never graded) below its
``max_depth``. ``EnvConfig.max_depth = 0`` turns `llm()` off.

The async methods are the real ones (many episodes share one event loop); the sync `reset`/`step` run them
on the environment's own loop thread, for scripts and notebooks. This module never sees a model.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from fathom import __version__
from fathom.env.models import CellRecord, RLMAction, RLMObservation, RLMState, SubCallRecord
from fathom.env.parsing import code_blocks
from fathom.env.prompts import CellView, first_user_message, render_cells, system_prompt
from fathom.env.sublm import SubLM, SubLMRequest
from fathom.reward.compose import compose
from fathom.reward.config import RewardConfig
from fathom.reward.outcome import EpisodeOutcome
from fathom.sandbox import Sandbox, SandboxClosed, SandboxConfig, SandboxPool
from fathom.tasks import Task, estimate_tokens, generate_task, load_tasks
from fathom.tasks.schema import task_from_dict

MAX_DEPTH = 4


@dataclass(frozen=True)
class EnvConfig:
    max_iterations: int = 12
    max_episode_tokens: int = 16_384
    # Wall time of one step, all its cells and llm() calls together (a cell's own limits still apply);
    # a cell that ignores the timer is killed one sandbox grace period (hard - soft) later.
    step_timeout_s: float = 60.0
    max_depth: int = 1
    chunk_chars: int = 16_000
    default_length_tokens: int = 8_192
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.max_depth <= MAX_DEPTH:
            raise ValueError(f"max_depth must be in 0..{MAX_DEPTH}, got {self.max_depth}")
        if self.max_iterations < 1:
            raise ValueError(f"max_iterations must be >= 1, got {self.max_iterations}")
        if self.max_episode_tokens < 1:
            raise ValueError(f"max_episode_tokens must be >= 1, got {self.max_episode_tokens}")
        if not self.step_timeout_s > 0:
            raise ValueError(f"step_timeout_s must be > 0, got {self.step_timeout_s}")


def _not_run(code: str, limit: float) -> CellRecord:
    error = f"TimeoutError: not run: this turn used up its time limit of {limit:g} s"
    return CellRecord(code=code, stdout="", error=error, truncated_chars=0, elapsed_s=0.0, timed_out=True,
                      restarted=False)  # fmt: skip


class TaskNotFound(KeyError):
    """A reset asked for a task id this environment was not given."""


@dataclass(frozen=True)
class ChildTask:
    """The task of a recursive sub-call: the parent's prompt over the parent's chunk; never graded."""

    question: str
    document: str
    id: str = "subcall"
    family: str = "subcall"
    answer: Any = None
    metric: str = "exact"

    @property
    def length_chars(self) -> int:
        return len(self.document)

    @property
    def length_tokens(self) -> int:
        return estimate_tokens(self.document)


class RLMEnvironment(Environment[RLMAction, RLMObservation, RLMState]):
    SUPPORTS_CONCURRENT_SESSIONS = True
    # In-process, the caller generated the turn and may pass its exact token count. A server sets False:
    # a client could report any count, so the environment counts the text it received itself.
    TRUSTS_TOKEN_COUNTS = True

    def __init__(
        self,
        config: EnvConfig | None = None,
        sub_lm: SubLM | None = None,
        tasks: Sequence[Task] | str | Path | None = None,
        pool: SandboxPool | None = None,
        depth: int = 0,
    ) -> None:
        """`depth`: 0 for a graded episode, d for the child episode of a depth-d `llm()` call."""
        super().__init__()
        self.config = config or EnvConfig()
        self.sub_lm, self.pool, self.depth = sub_lm, pool, depth
        if isinstance(tasks, str | Path):
            tasks = load_tasks(tasks)
        self._tasks = {t.id: t for t in tasks or ()}
        self._sandbox: Sandbox | None = None
        self._retiring: list[asyncio.Task[None]] = []  # ended episodes' workers, being killed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sync_loop: asyncio.AbstractEventLoop | None = None  # the sync API's own loop, on its own thread
        self._sync_thread: threading.Thread | None = None
        self._task: Any = None
        self._state = RLMState()
        self._reward: dict[str, Any] | None = None
        self._turn_subcalls: list[SubCallRecord] = []
        self.trace: list[dict[str, Any]] = []

    # ---- task resolution -------------------------------------------------------------------------
    def resolve_task(
        self,
        task: Task | dict[str, Any] | None = None,
        task_id: str | None = None,
        family: str | None = None,
        seed: int | None = None,
        length_tokens: int | None = None,
    ) -> Task:
        given = sum(x is not None for x in (task, task_id, family))
        if given != 1:
            raise ValueError("reset needs exactly one of: task, task_id, family (+ seed)")
        if task is not None:
            return task_from_dict(task) if isinstance(task, dict) else task
        if task_id is not None:
            if task_id not in self._tasks:
                raise TaskNotFound(f"unknown task_id {task_id!r} ({len(self._tasks)} tasks loaded)")
            return self._tasks[task_id]
        return generate_task(family, seed or 0, length_tokens or self.config.default_length_tokens)

    @staticmethod
    def _document_source(task: Any) -> tuple[Path | None, str | None]:
        """(file, None) for a document on disk (bound without reading it), (None, text) for an inline one
        (the sandbox keeps it in a sealed in-memory file)."""
        path = getattr(task, "document_file", None)
        if callable(path) and (found := path()) is not None:
            return Path(found), None
        return None, task.document

    # ---- OpenEnv contract ------------------------------------------------------------------------
    async def reset_async(
        self,
        task: Task | dict[str, Any] | None = None,
        task_id: str | None = None,
        family: str | None = None,
        seed: int | None = None,
        length_tokens: int | None = None,
        episode_id: str | None = None,
        **_: Any,
    ) -> RLMObservation:
        resolved = self.resolve_task(task, task_id, family, seed, length_tokens)
        await self._close_sandbox(wait_last=False)
        self._loop = asyncio.get_running_loop()
        self._task, self._reward, self.trace = resolved, None, []
        ctx_path, ctx_text = self._document_source(resolved)
        llm = self._llm_handler if self.config.max_depth >= 1 and self.sub_lm is not None else None
        if self.pool is not None:
            self._sandbox = await self.pool.start(ctx_path, llm, ctx_text=ctx_text)
        else:
            self._sandbox = await Sandbox.start(ctx_path, self.config.sandbox, llm, ctx_text=ctx_text)
        self._state = RLMState(
            episode_id=episode_id or uuid.uuid4().hex,
            task_id=resolved.id,
            family=resolved.family,
            max_iterations=self.config.max_iterations,
            isolation=list(self._sandbox.layers),
        )
        text = first_user_message(
            resolved.question, resolved.length_chars, resolved.length_tokens, llm is not None
        )
        return RLMObservation(
            text=text,
            system_prompt=system_prompt(self.config.chunk_chars),
            question=resolved.question,
            task_id=resolved.id,
            family=resolved.family,
            doc_chars=resolved.length_chars,
            doc_tokens=resolved.length_tokens,
            doc_type="str",
            max_iterations=self.config.max_iterations,
        )

    async def step_async(self, action: RLMAction, timeout_s: float | None = None, **_: Any) -> RLMObservation:
        if self._state.done:
            raise RuntimeError("the episode is over: call reset() for a new one")
        if self._sandbox is None or self._task is None:
            raise RuntimeError("step() before reset(): start an episode first")
        started = time.perf_counter()
        state, sandbox = self._state, self._sandbox  # close() may clear self._sandbox mid-step
        tokens = action.num_tokens if self.TRUSTS_TOKEN_COUNTS else None
        if tokens is None:
            tokens = estimate_tokens(action.text)
        self._turn_subcalls = []
        cells: list[CellRecord] = []
        answer_ready, answer = False, None
        limit = self.config.step_timeout_s
        blocks = code_blocks(action.text)
        for i, code in enumerate(blocks):
            left = started + limit - time.perf_counter()
            if left <= 0:
                cells += [_not_run(block, limit) for block in blocks[i:]]
                break
            try:
                result = await sandbox.execute(code, time_limit_s=left)
            except SandboxClosed:
                return await self._closed_during_step(tokens)
            cells.append(
                CellRecord(
                    code=code,
                    stdout=result.stdout,
                    error=result.error,
                    truncated_chars=result.truncated_chars,
                    elapsed_s=result.elapsed_s,
                    timed_out=result.timed_out,
                    restarted=result.restarted,
                )
            )
            if result.answer_ready:
                answer_ready, answer = True, result.answer
                break  # the answer is in: later blocks of this turn do not run
        stats = sandbox.stats
        state.iteration += 1
        state.step_count += 1
        state.tokens += tokens
        state.llm_calls, state.llm_chars, state.restarts = stats.llm_calls, stats.llm_chars, stats.restarts
        state.answer_ready, state.answer = answer_ready, answer
        end_reason = None
        if answer_ready:
            end_reason = "answered"
        elif state.iteration >= self.config.max_iterations:
            end_reason = "max_iterations"
        elif state.tokens >= self.config.max_episode_tokens:
            end_reason = "token_budget"
        views = [CellView(c.stdout, c.error, c.truncated_chars, c.timed_out, c.restarted) for c in cells]
        observation = RLMObservation(
            text=render_cells(views, state.iteration, self.config.max_iterations),
            task_id=state.task_id,
            family=state.family,
            iteration=state.iteration,
            max_iterations=self.config.max_iterations,
            cells=cells,
            subcalls=list(self._turn_subcalls),
            answer_ready=answer_ready,
            answer=answer,
            end_reason=end_reason,
        )
        if end_reason is not None:
            await self._end(observation)
        self.trace.append(
            {
                "iteration": state.iteration,
                "action": action.text,
                "tokens": tokens,
                "observation": observation.text,
                "cells": [c.model_dump() for c in cells],
                "subcalls": [s.model_dump() for s in observation.subcalls],
                "elapsed_s": time.perf_counter() - started,
            }
        )
        return observation

    async def _closed_during_step(self, tokens: int) -> RLMObservation:
        """The environment was closed while a step ran: the turn counts, the episode ends as "closed"."""
        self._state.iteration += 1
        self._state.step_count += 1
        self._state.tokens += tokens
        return await self.finish_async("closed")

    async def finish_async(self, reason: str) -> RLMObservation:
        """End the episode from outside (a rollout engine's budget ran out): graded as it stands."""
        if self._task is None:
            raise RuntimeError("finish() before reset()")
        observation = RLMObservation(
            text="",
            task_id=self._state.task_id,
            family=self._state.family,
            iteration=self._state.iteration,
            max_iterations=self.config.max_iterations,
            answer_ready=self._state.answer_ready,
            answer=self._state.answer,
            end_reason=reason,
        )
        if not self._state.done:
            await self._end(observation)
        else:
            observation.done, observation.reward_breakdown = True, self._reward
            observation.reward = None if self._reward is None else self._reward["total"]
        return observation

    async def _end(self, observation: RLMObservation) -> None:
        self._state.done = True
        observation.done = True
        if not isinstance(self._task, ChildTask):
            breakdown = compose(self._task, self.outcome(), self.config.reward)
            self._reward = breakdown.to_dict()
            observation.reward = breakdown.total
            observation.reward_breakdown = self._reward
        self._retire_sandbox()

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="fathom-rlm",
            description=(
                "Recursive Language Model environment: answer a question about a long document held in a "
                "sandboxed Python REPL as `ctx`, with llm() sub-calls and FINAL(value)."
            ),
            version=__version__,
            author="FATHOM developers",
        )

    @property
    def state(self) -> RLMState:
        return self._state

    @property
    def task(self) -> Any:
        return self._task

    def outcome(self) -> EpisodeOutcome:
        s = self._state
        return EpisodeOutcome(
            answer=s.answer if s.answer_ready else None,
            answered=s.answer_ready,
            tokens=s.tokens,
            llm_calls=s.llm_calls,
            turns=s.iteration,
            llm_chars=s.llm_chars,
        )

    # ---- sync wrappers ---------------------------------------------------------------------------
    def _run_sync(self, coro: Awaitable[Any]) -> Any:
        """Run on this environment's own loop thread: works from scripts and from inside a running loop
        (a notebook kernel), and the sandbox worker stays bound to one long-lived thread."""
        if self._sync_loop is None:
            self._sync_loop = asyncio.new_event_loop()
            self._sync_thread = threading.Thread(
                target=self._sync_loop.run_forever, name="fathom-env", daemon=True
            )
            self._sync_thread.start()
        if threading.current_thread() is self._sync_thread:
            raise RuntimeError("the sync API was called from the environment's own loop: use the async API")
        return asyncio.run_coroutine_threadsafe(coro, self._sync_loop).result()  # type: ignore[arg-type]

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> RLMObservation:
        return self._run_sync(self.reset_async(seed=seed, episode_id=episode_id, **kwargs))

    def step(self, action: RLMAction, timeout_s: float | None = None, **kwargs: Any) -> RLMObservation:
        return self._run_sync(self.step_async(action, timeout_s=timeout_s, **kwargs))

    # ---- sub-calls -------------------------------------------------------------------------------
    async def _llm_handler(self, requests: Sequence[Any]) -> list[str]:
        started = time.perf_counter()
        reqs = [SubLMRequest(r.prompt, r.chunk) for r in requests]
        assert self.sub_lm is not None
        replies = [reply.text for reply in await self.sub_lm.complete(reqs)]
        elapsed = time.perf_counter() - started
        for r, text in zip(reqs, replies, strict=True):
            self._turn_subcalls.append(
                SubCallRecord(
                    prompt=r.prompt[:500],
                    chunk_chars=len(r.chunk),
                    reply=text[:500],
                    depth=self.depth + 1,
                    elapsed_s=elapsed / len(reqs),
                )
            )
        return replies

    # ---- teardown --------------------------------------------------------------------------------
    def _retire_sandbox(self) -> None:
        """Kill the ended episode's worker without holding back its final observation (the teardown, ~2 ms
        of SIGKILL, exit and cgroup removal, overlaps the client's next request)."""
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            self._retiring.append(asyncio.ensure_future(sandbox.close()))

    async def _close_sandbox(self, wait_last: bool = True) -> None:
        """Close the live worker and wait for the retiring ones, raising what their teardown raised. With
        ``wait_last=False`` (a reset) the newest retirement may go on beside the new episode: a reset does
        not wait for the last episode's exit, and the next reset or ``aclose`` collects it, so an
        environment has at most one worker dying in the background."""
        sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            await sandbox.close()
        retiring, self._retiring = self._retiring, []
        if not wait_last and retiring and not retiring[-1].done():
            self._retiring.append(retiring.pop())
        errors = [e for e in await asyncio.gather(*retiring, return_exceptions=True) if e is not None]
        if errors:  # every teardown is collected first, so none is left with its error unretrieved
            raise errors[0]

    async def aclose(self) -> None:
        await self._close_sandbox()

    def close(self) -> None:
        """Sync close, callable from any thread (OpenEnv calls it from an executor thread)."""
        loop = self._loop
        if self._sandbox is not None and loop is not None and loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                loop.create_task(self.aclose())
                return
            asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(timeout=30)
        if self._sync_loop is not None:
            self._sync_loop.call_soon_threadsafe(self._sync_loop.stop)
            assert self._sync_thread is not None
            self._sync_thread.join(timeout=30)
            self._sync_loop.close()
            self._sync_loop = self._sync_thread = None
