"""Generation services: one request at a time in, batched by whatever engine sits behind.

The rollout engine runs every episode as its own coroutine and asks for each model turn and each `llm()`
sub-call the moment it is ready: ``await service.generate(prompt_ids, sampling, adapter=...)``. No episode
waits for another's turn.

- `BatchingService` puts a batch backend (HF ``generate``, a scripted policy) behind that call: whatever is
  pending when the backend is free goes out as one batch (rows of one sampling setup and adapter state;
  each row cut to its own token budget), so episodes join the next batch as soon as they are ready.
- `VLLMService` drives a vLLM engine (``vllm.LLM``, TRL's colocated one included) with continuous batching:
  requests are added to the running engine as they arrive and answered as each finishes. One thread owns
  the engine; nothing else may call it while the service runs.
- `RoutedService` sends adapter-off requests (`llm()` read by the base weights, or by a second model) to a
  second service.

Timing and token counts per service are in `ServiceStats`. This module knows nothing of episodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from fathom.rollout.backends import Backend, Generation, Sampling


@dataclass
class ServiceStats:
    calls: int = 0  # batches (BatchingService) or engine steps (VLLMService)
    requests: int = 0
    seconds: float = 0.0  # wall time the engine was generating
    tokens: int = 0  # sampled tokens returned
    peak_batch: int = 0


class GenerationService(Protocol):
    stats: ServiceStats

    async def generate(self, prompt: list[int], sampling: Sampling, adapter: bool = True) -> Generation: ...


def cut_to(gen: Generation, max_new: int) -> Generation:
    """A generation cut to `max_new` tokens (a row generated in a batch with a larger budget)."""
    if len(gen.ids) <= max_new:
        return gen
    lps = None if gen.logprobs is None else gen.logprobs[:max_new]
    return Generation(gen.ids[:max_new], False, lps)


@dataclass
class _Pending:
    prompt: list[int]
    sampling: Sampling
    adapter: bool
    future: asyncio.Future[Generation]


def _batch_key(p: _Pending) -> tuple[Sampling, bool]:
    """Requests that may share a batch: one sampling setup (whatever each row's budget) and adapter state."""
    return replace(p.sampling, max_new_tokens=0), p.adapter


class BatchingService:
    """A batch backend behind per-request calls; a batch goes out whenever the backend is free.

    `adapter_off` is a context manager factory under which the backend generates with the base weights
    (``model.disable_adapter`` of a PEFT policy); without one, adapter-off requests are refused."""

    def __init__(
        self,
        backend: Backend,
        max_batch: int = 1024,
        adapter_off: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.backend, self.max_batch, self.adapter_off = backend, max_batch, adapter_off
        self.stats = ServiceStats()
        self._pending: list[_Pending] = []
        self._worker: asyncio.Task[None] | None = None

    async def generate(self, prompt: list[int], sampling: Sampling, adapter: bool = True) -> Generation:
        if not adapter and self.adapter_off is None:
            raise ValueError("an adapter-off request, but this backend has no adapter to switch off")
        loop = asyncio.get_running_loop()
        item = _Pending(prompt, sampling, adapter, loop.create_future())
        self._pending.append(item)
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        return await item.future

    async def _drain(self) -> None:
        await asyncio.sleep(0)  # let every request that is ready this tick join the first batch
        while self._pending:
            head = self._pending[0]
            key = _batch_key(head)
            batch = [p for p in self._pending if _batch_key(p) == key]
            batch = batch[: self.max_batch]
            # A fixed row order for a given set of prompts: sampled rows then draw the same random numbers
            # whatever order their episodes became ready in (rows with equal prompts are interchangeable).
            batch.sort(key=lambda p: (len(p.prompt), p.prompt))
            taken = {id(p) for p in batch}
            self._pending = [p for p in self._pending if id(p) not in taken]
            sampling = replace(head.sampling, max_new_tokens=max(p.sampling.max_new_tokens for p in batch))
            started = time.perf_counter()
            try:
                gens = await asyncio.to_thread(self._run, [p.prompt for p in batch], sampling, head.adapter)
            except BaseException as exc:  # our own failure: every waiting episode sees it, loudly
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(exc)
                for p in self._pending:
                    if not p.future.done():
                        p.future.set_exception(exc)
                self._pending = []
                raise
            s = self.stats
            s.calls += 1
            s.requests += len(batch)
            s.seconds += time.perf_counter() - started
            s.peak_batch = max(s.peak_batch, len(batch))
            for p, gen in zip(batch, gens, strict=True):
                gen = cut_to(gen, p.sampling.max_new_tokens)
                s.tokens += len(gen.ids)
                if not p.future.done():  # its episode may have been cancelled meanwhile
                    p.future.set_result(gen)

    def _run(self, prompts: list[list[int]], sampling: Sampling, adapter: bool) -> list[Generation]:
        off = contextlib.nullcontext() if adapter or self.adapter_off is None else self.adapter_off()
        with off:
            return self.backend.generate(prompts, sampling)


class RoutedService:
    """Policy requests to `main`; adapter-off requests (the base weights read an `llm()` call) to `base`.

    `base` is either the policy's own model with its adapter switched off (`base_adapter` False: it is asked
    with ``adapter=False``) or a second model whose own weights read (`base_adapter` True: a separate reader,
    such as the untrained model beside a fully fine-tuned policy, asked as it would be for its own turns)."""

    def __init__(self, main: GenerationService, base: GenerationService, base_adapter: bool = False) -> None:
        self.main, self.base, self.base_adapter = main, base, base_adapter

    @property
    def stats(self) -> ServiceStats:
        a, b = self.main.stats, self.base.stats
        return ServiceStats(
            a.calls + b.calls,
            a.requests + b.requests,
            a.seconds + b.seconds,
            a.tokens + b.tokens,
            max(a.peak_batch, b.peak_batch),
        )

    async def generate(self, prompt: list[int], sampling: Sampling, adapter: bool = True) -> Generation:
        if adapter:
            return await self.main.generate(prompt, sampling)
        return await self.base.generate(prompt, sampling, adapter=self.base_adapter)


def sampling_params(sampling: Sampling) -> Any:
    """vLLM's `SamplingParams` for a FATHOM `Sampling` (the sampled token's log-prob when asked)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        max_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k or -1,
        repetition_penalty=sampling.repetition_penalty,  # over prompt + output tokens, as HFBackend's
        logprobs=0 if sampling.logprobs else None,
        stop=list(sampling.stop_strings) or None,
        include_stop_str_in_output=True,
        ignore_eos=sampling.ignore_eos,
        output_kind=RequestOutputKind.FINAL_ONLY,  # one output per request, when it finishes
        # We read token ids, never vLLM's text: detokenizing every step is CPU time a small model's decode
        # step is bound by. Stop strings are matched on text, so they keep it.
        detokenize=bool(sampling.stop_strings),
    )


def token_prompt(ids: list[int]) -> Any:
    """A pre-tokenized prompt in the form vLLM's engine takes (its renderer's output for token ids)."""
    try:
        from vllm.inputs.engine import tokens_input
    except ImportError:  # vLLM before the renderer API: the raw prompt dict
        return {"prompt_token_ids": ids}
    return tokens_input(ids)


def generation_of(output: Any, want_logprobs: bool) -> Generation:
    """A FATHOM `Generation` from a finished vLLM `RequestOutput`."""
    comp = output.outputs[0]
    ids = list(comp.token_ids)
    lps = None
    if want_logprobs:
        if comp.logprobs is None:
            raise RuntimeError("vLLM returned no log-probs although they were asked for")
        lps = [step[tok].logprob for step, tok in zip(comp.logprobs, ids, strict=True)]
    return Generation(ids, comp.finish_reason == "stop", lps)


# vLLM's in-process engines (VLLM_ENABLE_V1_MULTIPROCESSING=0, as TRL's colocated engine runs) keep the model's
# forward context in module globals: two engines of one process stepping at once read each other's attention
# metadata and decode garbage (bench/RESULTS.md, run 14). So every engine of a process is called under this
# lock: one engine's step at a time.
_ENGINE_LOCK = threading.Lock()


@dataclass
class _Request:
    prompt: list[int]
    sampling: Sampling
    future: asyncio.Future[Generation]
    loop: asyncio.AbstractEventLoop
    added_at: float = field(default_factory=time.perf_counter)


class VLLMService:
    """Continuous batching over a vLLM engine: each request joins the running batch as soon as it arrives.

    `engine` is a ``vllm.LLM`` (its ``llm_engine`` is driven with ``add_request`` / ``step``). Use as a
    context manager (or `start` / `stop`): while it runs, its thread alone calls the engine, so weight syncs
    (TRL's ``sync_weights``) happen outside it, between rollout batches."""

    def __init__(
        self,
        engine: Any,
        make_params: Callable[[Sampling], Any] | None = None,
        make_prompt: Callable[[list[int]], Any] | None = None,
    ) -> None:
        """`make_params` / `make_prompt` turn a request into vLLM's form (`sampling_params`, `token_prompt`
        by default; the CPU tests drive the loop with an engine of their own, vLLM not being installable
        there)."""
        self.llm_engine = getattr(engine, "llm_engine", engine)
        self.make_params = make_params or sampling_params
        self.make_prompt = make_prompt or token_prompt
        self.stats = ServiceStats()
        self._inbox: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ids = itertools.count()
        self._error: BaseException | None = None

    def __enter__(self) -> VLLMService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("VLLMService already started")
        if self.llm_engine.has_unfinished_requests():
            raise RuntimeError("the vLLM engine still has requests of another caller")
        self._thread = threading.Thread(target=self._loop, name="fathom-vllm", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._inbox.put(None)
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise RuntimeError("the vLLM driver failed") from self._error

    async def generate(self, prompt: list[int], sampling: Sampling, adapter: bool = True) -> Generation:
        if not adapter:
            raise ValueError(
                "VLLMService serves the policy's weights only: route adapter-off requests elsewhere"
            )
        if self._thread is None:
            raise RuntimeError("VLLMService is not running: use it as a context manager")
        if self._error is not None:
            raise RuntimeError("the vLLM driver failed") from self._error
        loop = asyncio.get_running_loop()
        request = _Request(prompt, sampling, loop.create_future(), loop)
        self._inbox.put(request)
        return await request.future

    def _loop(self) -> None:
        live: dict[str, _Request] = {}
        stopping = False
        try:
            while not (stopping and not live):
                # Block for work only when the engine is idle; otherwise take what has arrived and step.
                block = not live and not stopping
                while True:
                    try:
                        item = self._inbox.get(block=block)
                    except queue.Empty:
                        break
                    block = False
                    if item is None:
                        stopping = True
                        continue
                    rid = f"fathom-{next(self._ids)}"
                    params = self.make_params(item.sampling)
                    with _ENGINE_LOCK:
                        self.llm_engine.add_request(rid, self.make_prompt(item.prompt), params)
                    live[rid] = item
                    self.stats.requests += 1
                if not live:
                    continue
                with _ENGINE_LOCK:
                    started = time.perf_counter()
                    outputs = self.llm_engine.step()
                    self.stats.seconds += time.perf_counter() - started
                self.stats.calls += 1
                self.stats.peak_batch = max(self.stats.peak_batch, len(live))
                for out in outputs:
                    if not out.finished:
                        continue
                    item = live.pop(out.request_id)
                    gen = generation_of(out, item.sampling.logprobs)
                    self.stats.tokens += len(gen.ids)
                    item.loop.call_soon_threadsafe(_resolve, item.future, gen, None)
        except BaseException as exc:
            self._error = exc
            for item in live.values():
                item.loop.call_soon_threadsafe(_resolve, item.future, None, exc)
            while True:  # requests that arrive after the failure fail too
                try:
                    item = self._inbox.get(block=False)
                except queue.Empty:
                    break
                if item is not None:
                    item.loop.call_soon_threadsafe(_resolve, item.future, None, exc)


def _resolve(future: asyncio.Future[Generation], gen: Generation | None, exc: BaseException | None) -> None:
    if future.done():  # the episode that asked was cancelled
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        assert gen is not None
        future.set_result(gen)
