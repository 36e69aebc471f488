"""Generation inside the trainer: the live weights, timing, adapters off for the sub-LM, and lockstep ranks.

- `policy_model(trainer)`: the trainer's current weights, unwrapped for generation (DDP/DeepSpeed/FSDP, as
  TRL does it itself).
- `TimedBackend`: wraps a `fathom.rollout` backend and counts calls, seconds and generated tokens, so a step's
  wall time splits into generation and environment; it also enters the trainer's autocast and this rank's
  CUDA device around each call (both are thread-local, and the engine generates from worker threads, where
  the current device would otherwise be cuda:0 on every rank).
- `LockstepBackend`: every rank makes the same number of generate calls per rollout batch. Under FSDP (and
  ZeRO-3 without gathered weights) each forward is a collective, and a data-dependent turn loop would
  otherwise deadlock when ranks finish after different numbers of turns. Each call is announced with an
  all-reduce; a rank that is done keeps answering with a one-token dummy generation until every rank is done.
  Inside a call, transformers' ``synced_gpus`` keeps the forwards in step (a rank whose rows have ended keeps
  forwarding until every rank's have); `synced_generation` makes sure it is on.

This module does not decide what is generated; `fathom.rollout.engine` does.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from fathom.rollout.backends import Backend, Generation, Sampling


@contextlib.contextmanager
def policy_model(trainer: Any) -> Iterator[Any]:
    """The unwrapped, current policy for generation (TRL's own recipe in ``_generate_single_turn``)."""
    from trl.models import unwrap_model_for_generation

    summon = getattr(trainer, "_dist", None)
    full_params = (
        summon.summon_full_params(trainer.model_wrapped, recurse=False)
        if summon is not None
        else contextlib.nullcontext()
    )
    with (
        unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
        ) as model,
        full_params,
    ):
        yield model


@contextlib.contextmanager
def synced_generation(model: Any) -> Iterator[None]:
    """``generate`` on `model` runs with ``synced_gpus``: every rank makes the same number of forwards per call.

    transformers turns ``synced_gpus`` on when ``is_fsdp_managed_module(self)``: FSDP1, or the
    ``_is_fsdp_managed_module`` flag, which torch's ``fully_shard`` (FSDP2, what accelerate applies) sets on
    the modules it manages. The flag is set here too, for the duration, on the module whose ``generate`` runs
    (the base model under PEFT), so lockstep does not rest on that detail of torch and transformers (and
    ``rollout.lockstep = "on"`` gets synced forwards without FSDP).
    """
    targets = [model]
    if hasattr(model, "get_base_model"):
        targets.append(model.get_base_model())
    saved = [(t, t.__dict__.get("_is_fsdp_managed_module")) for t in targets]
    for t in targets:
        t._is_fsdp_managed_module = True
    try:
        yield
    finally:
        for t, value in saved:
            if value is None:
                t.__dict__.pop("_is_fsdp_managed_module", None)
            else:
                t._is_fsdp_managed_module = value


def device_context(device: Any) -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """Makes `device` the current CUDA device of the calling thread (a no-op off CUDA)."""
    import torch

    if device is None or torch.device(device).type != "cuda":
        return contextlib.nullcontext
    return lambda: torch.cuda.device(torch.device(device))


class TimedBackend:
    def __init__(
        self,
        inner: Backend,
        context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
        device: Any = None,
    ) -> None:
        self.inner, self.context = inner, context or contextlib.nullcontext
        self.device_context = device_context(device)
        self.model = getattr(inner, "model", None)  # EngineSubLM(use_adapters=False) reaches the model here
        self.calls, self.seconds, self.tokens = 0, 0.0, 0

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        started = time.perf_counter()
        with self.device_context(), self.context():
            out = self.inner.generate(prompts, sampling)
        self.seconds += time.perf_counter() - started
        self.calls += 1
        self.tokens += sum(len(g.ids) for g in out)
        return out


class LockstepBackend:
    """Same number of generate calls on every rank; `drain()` after this rank's rollouts are done."""

    def __init__(self, inner: Backend, dummy_prompt: list[int], device: Any = None) -> None:
        """`device`: where the announcement's flag lives (this rank's GPU under NCCL; the default is the
        current CUDA device at construction, which must be taken on the trainer's thread, or the CPU)."""
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError("LockstepBackend needs an initialised torch.distributed process group")
        self.inner, self.dummy = inner, dummy_prompt
        self.model = getattr(inner, "model", None)
        self.rounds = 0
        self._lock = threading.Lock()  # policy turns and sub-calls come from worker threads
        if device is None:
            nccl = "nccl" in str(dist.get_backend())
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
        self.device = torch.device(device)

    def _announce(self, busy: bool) -> int:
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1 if busy else 0], device=self.device)
        dist.all_reduce(flag)
        return int(flag.item())

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        with self._lock:
            self._announce(True)
            self.rounds += 1
            if not prompts:  # still take part in the collective forwards
                self.inner.generate([self.dummy], Sampling(max_new_tokens=1, temperature=0.0))
                return []
            return self.inner.generate(prompts, sampling)

    def drain(self) -> None:
        """Answer other ranks' generate calls with dummies until every rank has finished its rollouts."""
        with self._lock:
            while self._announce(False) > 0:
                self.rounds += 1
                self.inner.generate([self.dummy], Sampling(max_new_tokens=1, temperature=0.0))


def needs_lockstep(trainer: Any, setting: str) -> bool:
    """Whether generation involves collectives here: FSDP, or ZeRO-3 without gathered weights."""
    if setting != "auto":
        return setting == "on" and trainer.accelerator.num_processes > 1
    if trainer.accelerator.num_processes == 1:
        return False
    if getattr(trainer, "is_fsdp_enabled", False):
        return True
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    zero3 = plugin is not None and plugin.zero_stage == 3
    return zero3 and not trainer.args.ds3_gather_for_generation
