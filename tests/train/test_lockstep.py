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


def _fsdp_rank(rank: int, port: int, shard: bool, out: dict) -> None:
    """The tiny model, sharded with FSDP2 over two CPU ranks or replicated; rank 0 needs two long generations,
    rank 1 one short one."""
    from torch.distributed.fsdp import fully_shard

    from fathom.models import ModelSpec, load_model
    from fathom.rollout.backends import HFBackend
    from fathom.train.generation import synced_generation

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model, tokenizer = load_model(ModelSpec(name="tiny-smol", device="cpu"))
        if shard:
            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)
        forwards = []
        model.register_forward_pre_hook(lambda *_: forwards.append(1))
        backend = LockstepBackend(HFBackend(model, tokenizer, mode="plain"), dummy_prompt=[1, 2])
        greedy = Sampling(max_new_tokens=6 if rank == 0 else 2, temperature=0.0)
        outputs = []
        with synced_generation(model):
            for _ in range(2 if rank == 0 else 1):
                outputs.append(backend.generate([[5, 6, 7, 8 + rank]], greedy))
            backend.drain()
        out[rank] = ([len(g[0].ids) for g in outputs], backend.rounds, len(forwards))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("shard", [True, False], ids=["fsdp2", "replicated"])
def test_ranks_generating_different_lengths_and_counts_make_the_same_forwards(shard):
    """Rank 0 needs two 6-token generations, rank 1 one 2-token generation. Both make two generate calls (one
    a dummy) and the same 12 forwards (1 prefill + 5 decode steps, twice): the short rank keeps forwarding
    until the long one is done. Under FSDP2 every forward all-gathers the layers' shards, so this is what
    keeps the ranks' collectives paired; replicated, it is `synced_generation` alone that does it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_fsdp_rank, args=(port, shard, out), nprocs=2, join=True)
        assert dict(out) == {0: ([6, 6], 2, 12), 1: ([2], 2, 12)}


def test_synced_generation_marks_the_generating_module_and_restores_it():
    from fathom.models import LoraSpec, ModelSpec, load_model
    from fathom.train.generation import synced_generation

    model, _ = load_model(ModelSpec(name="tiny-smol", device="cpu", lora=LoraSpec(r=4, alpha=8)))
    base = model.get_base_model()
    with synced_generation(model):
        assert model._is_fsdp_managed_module and base._is_fsdp_managed_module
    assert not hasattr(base, "_is_fsdp_managed_module") and not hasattr(model, "_is_fsdp_managed_module")
