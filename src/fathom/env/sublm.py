"""Sub-LM services: what answers `llm(prompt, chunk)` and `llm_batch(...)` from inside the REPL.

A service is any object with ``async complete(requests) -> list[SubLMReply]``. Three real ones:

- `ScriptedSubLM`: a plain Python function ``(prompt, chunk) -> str`` (tests, the expert policy), run
  on its own thread.
- `OpenAISubLM`: any OpenAI-compatible endpoint (vLLM, llama.cpp server, …) through the `openai` client.
- `HFSubLM`: an in-process transformers model; requests from *all* episodes that arrive while the model
  is busy are batched into one `generate` call by `RequestBatcher`.

The environment wraps a service per episode to count calls and enforce depth (see `environment.py`);
services themselves hold no per-episode state. This module does not run child RLM episodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class SubLMRequest:
    prompt: str
    chunk: str

    @property
    def chars(self) -> int:
        return len(self.prompt) + len(self.chunk)


@dataclass(frozen=True)
class SubLMReply:
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class SubLM(Protocol):
    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]: ...


def render_request(request: SubLMRequest) -> str:
    """The single user message a plain sub-LM sees."""
    if not request.chunk:
        return request.prompt
    return f"{request.prompt}\n\n<text>\n{request.chunk}\n</text>"


class ScriptedSubLM:
    """Answers with a Python function; used by tests and by the expert policy's simulated reader.

    The function runs on the service's own thread, off the event loop: a reader scanning large chunks
    for many episodes would otherwise stall every other session the loop serves. One thread, because
    the calls are pure Python and the GIL runs one at a time anyway; nor does it take a thread of the
    loop's default pool, which resets need."""

    def __init__(self, fn: Callable[[str, str], str]) -> None:
        self.fn = fn
        self.calls = 0
        self._thread: ThreadPoolExecutor | None = None  # started on the first call

    def _answer(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        return [SubLMReply(self.fn(r.prompt, r.chunk)) for r in requests]

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        self.calls += 1
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fathom-scripted-sub-lm")
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._answer, list(requests))


class RequestBatcher(Generic[T, R]):
    """Coalesces requests from many concurrent callers into batches for a batch function.

    Callers ``await submit(items)``. A batch goes out when every caller the owner expects has submitted
    (`expect` / `done` count callers that may still submit, e.g. episodes running a cell), or after
    `max_wait_s` at most, so a caller stuck in a long cell never stalls the others for long. While a batch
    runs, new items queue for the next one. So N episodes that call `llm()` in the same turn cost one batched
    generation, not N.
    """

    def __init__(
        self,
        run_batch: Callable[[list[T]], Awaitable[list[R]]],
        max_batch: int = 256,
        max_wait_s: float = 0.05,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.run_batch, self.max_batch, self.max_wait_s = run_batch, max_batch, max_wait_s
        self.batches_run = 0
        self._pending: list[tuple[T, asyncio.Future[R]]] = []
        self._callers_waiting = 0
        self._expected = 0  # callers that may still submit before the next batch should go
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None

    def expect(self, callers: int) -> None:
        """`callers` more may submit soon (e.g. episodes starting a step)."""
        self._expected += callers

    def done(self) -> None:
        """One expected caller will not submit any more (its step ended)."""
        self._expected = max(0, self._expected - 1)
        self._poke()

    def _poke(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def _everyone_in(self) -> bool:
        return self._expected == 0 or self._callers_waiting >= self._expected

    async def submit(self, items: Sequence[T]) -> list[R]:
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in items]
        self._pending.extend(zip(items, futures, strict=True))
        self._callers_waiting += 1
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._drain())
        self._poke()
        try:
            return list(await asyncio.gather(*futures))
        finally:
            self._callers_waiting -= 1

    async def _gather_callers(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        await asyncio.sleep(0)  # let every caller that is ready this tick enqueue first
        while not self._everyone_in() and (left := deadline - loop.time()) > 0:
            self._wakeup = asyncio.Event()
            try:
                await asyncio.wait_for(self._wakeup.wait(), left)
            except TimeoutError:
                break
            finally:
                self._wakeup = None

    async def _drain(self) -> None:
        await self._gather_callers()
        while self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            self.batches_run += 1
            try:
                results = await self.run_batch([item for item, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"batch function returned {len(results)} results for {len(batch)}")
            except Exception as exc:  # the failure belongs to every caller of this batch, not to us
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (_, fut), result in zip(batch, results, strict=True):
                if not fut.done():
                    fut.set_result(result)


class OpenAISubLM:
    """An OpenAI-compatible chat endpoint; concurrency is capped, batching is the server's job."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "EMPTY",
        max_tokens: int = 512,
        temperature: float = 0.0,
        max_concurrency: int = 32,
        timeout_s: float = 120.0,
    ) -> None:
        from openai import AsyncOpenAI

        self.client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s)
        self.model, self.max_tokens, self.temperature = model, max_tokens, temperature
        self._semaphore = asyncio.Semaphore(max_concurrency)

    async def _one(self, request: SubLMRequest) -> SubLMReply:
        async with self._semaphore:
            response = await self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": render_request(request)}],
                max_tokens=self.max_tokens,
                temperature=self.temperature,
            )
        usage = response.usage
        return SubLMReply(
            response.choices[0].message.content or "",
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
        )

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))


class HFSubLM:
    """An in-process transformers causal LM answering sub-calls, batched across episodes.

    `generate` runs in a worker thread so the event loop keeps serving the sandboxes meanwhile. The
    chunk is cut (in tokens) so prompt + chunk fits `max_input_tokens`; the cut is visible to nobody but
    the sub-LM, exactly as a real context window would cut it.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int = 256,
        max_input_tokens: int = 4096,
        temperature: float = 0.0,
        max_batch: int = 64,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.max_input_tokens = max_new_tokens, max_input_tokens
        self.temperature = temperature
        self._batcher: RequestBatcher[SubLMRequest, SubLMReply] = RequestBatcher(self._run, max_batch)

    @property
    def batches_run(self) -> int:
        return self._batcher.batches_run

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        return await self._batcher.submit(requests)

    def _encode(self, request: SubLMRequest) -> list[int]:
        tok = self.tokenizer
        budget = self.max_input_tokens - 64  # room for the template around the message
        chunk_ids = tok.encode(request.chunk, add_special_tokens=False)
        prompt_len = len(tok.encode(request.prompt, add_special_tokens=False))
        if prompt_len + len(chunk_ids) > budget:
            chunk_ids = chunk_ids[: max(0, budget - prompt_len)]
        cut = SubLMRequest(request.prompt, tok.decode(chunk_ids))
        message = render_request(cut)
        if getattr(tok, "chat_template", None):
            return list(
                tok.apply_chat_template(
                    [{"role": "user", "content": message}],
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=False,
                )
            )
        return tok.encode(message)

    async def _run(self, requests: list[SubLMRequest]) -> list[SubLMReply]:
        encoded = [self._encode(r) for r in requests]
        outputs = await asyncio.to_thread(self._generate, encoded)
        return [
            SubLMReply(self.tokenizer.decode(out, skip_special_tokens=True), len(inp), len(out))
            for inp, out in zip(encoded, outputs, strict=True)
        ]

    def _generate(self, encoded: list[list[int]]) -> list[list[int]]:
        import torch

        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        width = max(len(ids) for ids in encoded)
        device = next(self.model.parameters()).device
        input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        attention = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):  # left padding: every row ends where generation starts
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1
        sampling = (
            {"do_sample": True, "temperature": self.temperature}
            if self.temperature > 0
            else {"do_sample": False}
        )
        with torch.no_grad():
            out = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                max_new_tokens=self.max_new_tokens,
                pad_token_id=pad,
                **sampling,
            )
        results = []
        eos = tok.eos_token_id
        for row in out[:, width:].tolist():
            if eos in row:
                row = row[: row.index(eos)]
            results.append([t for t in row if t != pad])
        return results
