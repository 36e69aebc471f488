"""Lockstep generation: ranks that need different numbers of turns still make the same number of collective
generate calls (two CPU processes over gloo; the fake backend's generate is a collective, like an FSDP forward).
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fathom.rollout.backends import Generation, Sampling
from fathom.train.generation import LockstepBackend


class CollectiveBackend:
    """Each generate is one all-reduce, as a forward over sharded weights would be."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        dist.all_reduce(torch.ones(1))
        self.calls += 1
        return [Generation([7], True) for _ in prompts]


def _rank(rank: int, port: int, turns: list[int], out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        inner = CollectiveBackend()
        backend = LockstepBackend(inner, dummy_prompt=[1])
        for _ in range(turns[rank]):  # this rank's episodes need this many generate calls
            assert backend.generate([[1, 2]], Sampling(max_new_tokens=4)) == [Generation([7], True)]
        backend.drain()
        out[rank] = (inner.calls, backend.rounds)
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)  # a broken lockstep deadlocks rather than fails
def test_ranks_with_different_turn_counts_make_the_same_number_of_calls():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(port, [3, 1], out), nprocs=2, join=True)
        assert dict(out) == {0: (3, 3), 1: (3, 3)}  # rank 1 answered rank 0's two extra calls with dummies
