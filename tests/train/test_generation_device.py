"""Generation from the engine's worker threads runs on this rank's GPU, not on the thread's default cuda:0.

The rollout engine calls the backend from `asyncio.to_thread` workers; CUDA's current device is per thread
and starts at 0, so on rank 1 of a multi-GPU run anything that relied on it (a lockstep flag, a CUDA-graph
decoder's streams) would land on GPU 0. `TimedBackend` enters the rank's device around each call. CPU runs
skip the CUDA part; the no-op on CPU is checked everywhere.
"""

from __future__ import annotations

import threading

import pytest
import torch

from fathom.rollout.backends import Generation, Sampling
from fathom.train.generation import TimedBackend


class DeviceProbe:
    def __init__(self) -> None:
        self.seen: list[int | None] = []

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        self.seen.append(torch.cuda.current_device() if torch.cuda.is_available() else None)
        return [Generation([1], True) for _ in prompts]


def call_from_a_thread(backend: TimedBackend) -> None:
    worker = threading.Thread(target=backend.generate, args=([[1, 2]], Sampling(max_new_tokens=1)))
    worker.start()
    worker.join()


def test_cpu_device_is_a_no_op():
    probe = DeviceProbe()
    backend = TimedBackend(probe, device=torch.device("cpu"))
    call_from_a_thread(backend)
    assert backend.calls == 1 and backend.tokens == 1


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_worker_threads_generate_on_the_ranks_gpu():
    probe = DeviceProbe()
    call_from_a_thread(TimedBackend(probe, device=torch.device("cuda", 1)))
    call_from_a_thread(TimedBackend(probe))  # without a device: the thread's own default
    assert probe.seen == [1, 0]
