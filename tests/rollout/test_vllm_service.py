"""`VLLMService`'s driver loop: requests join the running engine as they arrive and are answered as each
finishes. vLLM itself needs a GPU (it is not installable here), so the loop drives a small engine with
vLLM's `LLMEngine` surface (`add_request`, `step`, `has_unfinished_requests`) that emits one token per live
request per step; the real engine is checked on the H200 (bench/gpu_rollouts.py, scripts/gpu/rollouts.sh)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import pytest

from fathom.rollout import Sampling
from fathom.rollout.service import VLLMService


@dataclass
class _Completion:
    token_ids: list[int]
    logprobs: list[dict[int, object]] | None
    finish_reason: str


@dataclass
class _Output:
    request_id: str
    finished: bool
    outputs: list[_Completion]


@dataclass
class _Logprob:
    logprob: float


@dataclass
class StepEngine:
    """One token per live request per step; a request ends after `max_tokens` steps ("length")."""

    steps: int = 0
    live: dict[str, tuple[list[int], int]] = field(default_factory=dict)
    batch_sizes: list[int] = field(default_factory=list)
    thread_ids: set[int] = field(default_factory=set)

    def add_request(self, request_id, prompt, params):
        self.thread_ids.add(threading.get_ident())
        self.live[request_id] = ([], params)

    def has_unfinished_requests(self):
        return bool(self.live)

    def step(self):
        time.sleep(0.002)  # a decode step takes time: requests arrive while others are mid-generation
        self.thread_ids.add(threading.get_ident())
        self.steps += 1
        self.batch_sizes.append(len(self.live))
        out = []
        for rid, (ids, limit) in list(self.live.items()):
            ids.append(100 + len(ids))
            if len(ids) >= limit:
                del self.live[rid]
                lps = [{t: _Logprob(-0.5)} for t in ids]
                out.append(_Output(rid, True, [_Completion(list(ids), lps, "length")]))
        return out


def service(engine: StepEngine) -> VLLMService:
    return VLLMService(engine, make_params=lambda s: s.max_new_tokens, make_prompt=lambda ids: ids)


def test_requests_join_the_running_batch_and_finish_on_their_own():
    engine = StepEngine()

    async def go():
        with service(engine) as svc:
            long = asyncio.create_task(svc.generate([1], Sampling(max_new_tokens=40, logprobs=True)))
            await asyncio.sleep(0.01)  # the long request is already being decoded
            short = await svc.generate([2], Sampling(max_new_tokens=3, logprobs=True))
            steps_when_short_done = engine.steps
            return await long, short, steps_when_short_done, svc.stats

    long, short, steps_when_short_done, stats = asyncio.run(go())
    assert short.ids == [100, 101, 102] and short.logprobs == [-0.5] * 3 and not short.finished
    assert len(long.ids) == 40
    assert steps_when_short_done < 40  # the short one did not wait for the long one to finish
    assert max(engine.batch_sizes) == 2 and stats.requests == 2 and stats.tokens == 43
    assert len(engine.thread_ids) == 1 and threading.get_ident() not in engine.thread_ids  # one owner


def test_an_engine_failure_reaches_every_waiting_request():
    class Failing(StepEngine):
        def step(self):
            raise RuntimeError("CUDA error: device lost")

    async def go():
        svc = service(Failing())
        svc.start()
        try:
            return await asyncio.gather(
                svc.generate([1], Sampling(max_new_tokens=4)),
                svc.generate([2], Sampling(max_new_tokens=4)),
                return_exceptions=True,
            )
        finally:
            with pytest.raises(RuntimeError, match="vLLM driver failed"):
                svc.stop()

    results = asyncio.run(go())
    assert all(isinstance(r, RuntimeError) and "device lost" in str(r) for r in results)


def test_adapter_off_requests_are_refused():
    async def go():
        with service(StepEngine()) as svc:
            await svc.generate([1], Sampling(max_new_tokens=2), adapter=False)

    with pytest.raises(ValueError, match="route adapter-off requests"):
        asyncio.run(go())


def test_a_second_models_engine_reads_the_adapter_off_requests():
    """`fathom eval --reader-model`: two vLLM engines, the policy's and its reader's; `running` drives both,
    and a request the engine sends adapter-off (an llm() call read by "base") reaches the reader's engine,
    asked for its own weights."""
    from fathom.rollout.service import RoutedService
    from fathom.rollout.wiring import running

    policy_engine, reader_engine = StepEngine(), StepEngine()
    routed = RoutedService(service(policy_engine), service(reader_engine), base_adapter=True)

    async def go():
        with running(routed):
            turn = await routed.generate([1], Sampling(max_new_tokens=3))
            read = await routed.generate([2], Sampling(max_new_tokens=5), adapter=False)
        return turn, read

    turn, read = asyncio.run(go())
    assert len(turn.ids) == 3 and len(read.ids) == 5
    assert routed.main.stats.requests == 1 and routed.base.stats.requests == 1
    assert policy_engine.steps == 3 and reader_engine.steps == 5
    assert routed.main._thread is None and routed.base._thread is None  # both drivers stopped


def test_two_engines_of_one_process_never_step_at_once():
    """vLLM's in-process engines share the forward context (module globals): run 14's policy and reader
    engines stepping together decoded garbage. Each engine here records whether another was mid-step."""
    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    class Watched(StepEngine):
        def __init__(self, name):
            super().__init__()
            self.name = name

        def step(self):
            inside.append(self.name)
            if len(inside) > 1:
                overlaps.append(tuple(inside))
            try:
                return super().step()
            finally:
                inside.remove(self.name)

    from fathom.rollout.service import RoutedService
    from fathom.rollout.wiring import running

    policy_engine, reader_engine = Watched("policy"), Watched("reader")
    routed = RoutedService(service(policy_engine), service(reader_engine), base_adapter=True)

    async def go():
        with running(routed):
            return await asyncio.gather(
                *(routed.generate([i], Sampling(max_new_tokens=20)) for i in range(4)),
                *(routed.generate([i], Sampling(max_new_tokens=20), adapter=False) for i in range(4)),
            )

    gens = asyncio.run(go())
    assert all(len(g.ids) == 20 for g in gens)
    assert policy_engine.steps >= 20 and reader_engine.steps >= 20  # both engines ran, interleaved
    assert overlaps == []
