"""TRL's ``rollout_func`` over FATHOM's rollout engine, and the reward function that logs each episode.

`FathomRollout(prompts, trainer)` gets this rank's generation batch: slot prompts, each repeated
``num_generations`` times in a row (one GRPO group). It resolves each slot to its task (`tasksource`), runs
every episode through the rollout engine (`fathom.rollout.wiring.build_engine`) with the trainer's *current*
weights — TRL's colocated vLLM engine with ``use_vllm`` (TRL syncs the weights, LoRA merged, before it calls
us), HF generate over the unwrapped model otherwise — and returns exactly one row per prompt entry:

- ``prompt_ids`` / ``completion_ids`` token-exact, ``env_mask`` (1 = sampled, trained; 0 = environment reply,
  attended but masked out of the loss), ``logprobs`` (vLLM's sampling log-probs, for TRL's importance-sampling
  correction; None with HF generate);
- ``fathom_reward``: the shaped reward (`recipe.shape_group`, using the recipe state of this step);
- ``fathom_info``: the reward components and behaviour of each episode, which `fathom_reward` logs
  through TRL's ``log_metric`` (so they reach metrics.jsonl, TensorBoard and W&B with TRL's own metrics);
- ``fathom_subcalls`` (only with ``rollout.train_subcalls``): each episode's `llm()` sub-calls, which
  `fathom.train.subcall_rows` turns into rows of their own.

Every episode is written whole to ``traces.jsonl``. An exception in our own code (environment, reward,
engine) propagates and stops the step: no row is silently dropped. Per-step sums for the recipe wait in
`StepStats` until the callback reduces them across ranks. This module does not update the recipe state or
touch the optimiser.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fathom.env import OpenAISubLM
from fathom.policies.readers import expert_reader
from fathom.reward.compose import COMPONENTS
from fathom.rollout import ChatFormat, Episode, HFBackend, RolloutConfig, Sampling
from fathom.rollout.service import GenerationService, ServiceStats
from fathom.rollout.wiring import build_engine, hf_service, running, vllm_service
from fathom.sandbox import SandboxConfig
from fathom.train.config import TrainConfig
from fathom.train.generation import (
    LockstepBackend,
    TimedBackend,
    needs_lockstep,
    policy_model,
    synced_generation,
)
from fathom.train.recipe import RecipeState, Scored, Shaped, shape_group
from fathom.train.runlog import JsonlWriter
from fathom.train.tasksource import TaskSource, parse_slot


def scored(episode: Episode) -> Scored | None:
    """The reward inputs of a finished episode (None only for an episode that never got a reward)."""
    b = episode.reward
    if b is None:
        return None
    return Scored(
        total=b.total,
        token_component=float(b.components["token_budget"]),
        correct=b.correct,
        score=b.score,
        model_tokens=episode.model_tokens,
    )


def uses_vllm(trainer: Any) -> bool:
    return bool(getattr(trainer.args, "use_vllm", False))


@dataclass
class StepStats:
    """This rank's sums since the recipe last read them."""

    rollouts: int = 0
    scored: int = 0
    reward_sum: float = 0.0
    correct_sum: float = 0.0
    model_tokens: int = 0
    generate_s: float = 0.0
    rollout_s: float = 0.0
    sampled_tokens: int = 0
    timings: list[float] = field(default_factory=list)


class FathomRollout:
    """The ``rollout_func`` of `fathom.train.grpo`; also used by periodic eval and the benchmark."""

    def __init__(
        self,
        config: TrainConfig,
        tokenizer: Any,
        source: TaskSource,
        state: RecipeState,
        traces: JsonlWriter | None = None,
    ) -> None:
        self.config, self.tokenizer, self.source, self.state, self.traces = (
            config,
            tokenizer,
            source,
            state,
            traces,
        )
        self.chat = ChatFormat(tokenizer, chat=config.model.chat)
        self.stats = StepStats()
        self._backend: HFBackend | None = None
        r = config.rollout
        self.engine_config = RolloutConfig(
            max_turns=r.max_turns,
            max_total_tokens=r.max_total_tokens,
            sub_sampling=Sampling(max_new_tokens=r.sub_max_new_tokens, temperature=0.0),
            sub_max_input_tokens=r.sub_max_input_tokens,
            max_depth=r.max_depth,
            context_tokens=r.vllm_max_model_len,
        )
        self.sandbox = SandboxConfig(
            soft_timeout_s=r.cell_soft_timeout_s, hard_timeout_s=r.cell_hard_timeout_s
        )

    def sampling(self, temperature: float | None = None, logprobs: bool = False) -> Sampling:
        r = self.config.rollout
        t = self.state.temperature if temperature is None else temperature
        return Sampling(
            max_new_tokens=r.max_new_tokens, temperature=t, top_p=r.top_p, top_k=r.top_k, logprobs=logprobs
        )

    def _reader(self) -> Any:
        r = self.config.rollout
        if r.sub_lm in ("policy", "base"):
            return r.sub_lm
        if r.sub_lm == "expert":
            return expert_reader()
        if r.sub_lm == "openai":
            return OpenAISubLM(r.sub_lm_url, r.sub_lm_model, max_tokens=r.sub_max_new_tokens)
        return None

    def run_episodes(
        self, trainer: Any, tasks: Sequence[Any], sampling: Sampling
    ) -> tuple[list[Episode], ServiceStats]:
        """Every task's episode with the trainer's current weights; returns the episodes and generation stats.

        With ``use_vllm`` the policy generates through TRL's colocated vLLM engine (weights synced by TRL
        before this call), continuously batched; otherwise HF generate over the unwrapped model."""
        r = self.config.rollout
        reader = self._reader()
        with policy_model(trainer) as model:
            if self._backend is None or self._backend.model is not model:
                mode = "plain" if r.generation_mode in ("auto", "vllm") else r.generation_mode
                self._backend = HFBackend(model, self.tokenizer, mode=mode, max_cache_len=r.max_cache_len)
            device = trainer.accelerator.device
            inner: Any = self._backend
            lockstep, synced = None, contextlib.nullcontext()
            if not uses_vllm(trainer) and needs_lockstep(trainer, r.lockstep):
                lockstep = inner = LockstepBackend(inner, self.chat.prompt_ids("", "ok"), device=device)
                synced = synced_generation(model)
            hf = hf_service(TimedBackend(inner, trainer.accelerator.autocast, device=device), model)
            service: GenerationService = hf
            if uses_vllm(trainer):
                # vLLM holds the merged policy; adapter-off llm() calls (sub_lm = "base") read with HF generate
                service = vllm_service(trainer.vllm_generation.llm, base=hf if reader == "base" else None)
                sampling = replace(sampling, logprobs=True)
            # Turn-synchronous batches where samples must be reproducible (HF generate; lockstep ranks)
            sync = (
                r.batching == "turns" or (r.batching == "auto" and not uses_vllm(trainer)) or bool(lockstep)
            )
            config = replace(self.engine_config, sync_turns=sync)
            if r.train_subcalls:  # trained llm() answers must be samples of the policy, not its argmax
                config = replace(config, sub_sampling=replace(sampling, max_new_tokens=r.sub_max_new_tokens))
            engine = build_engine(
                service, self.chat, config, reader, reward=self.config.reward, sandbox=self.sandbox
            )
            with synced, running(service):
                episodes = engine.run_sync(list(tasks), sampling)
                if lockstep is not None:
                    lockstep.drain()
        return episodes, service.stats

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        step = trainer.state.global_step + 1  # the optimizer step these rollouts train
        g = self.config.grpo.num_generations
        if len(prompts) % g:
            raise ValueError(f"rollout_func got {len(prompts)} prompts, not whole groups of {g}")
        slots = [parse_slot(p) for p in prompts]
        tier = self.state.tier
        tasks = [self.source.task(tier, step, s) for s in slots]
        started = time.perf_counter()
        episodes, gen_stats = self.run_episodes(trainer, tasks, self.sampling())
        wall = time.perf_counter() - started

        shaped: list[Shaped] = []
        for start in range(0, len(episodes), g):
            group = [scored(e) for e in episodes[start : start + g]]
            if any(s is None for s in group):  # every episode ends graded: a missing reward is our bug
                raise RuntimeError(f"an episode of group {start // g} ended without a reward")
            shaped += shape_group(group, self.state.penalty_weight, self.config.penalty, self.config.reward)

        with_logprobs = all(e.logprobs is not None for e in episodes)
        out: dict[str, Any] = {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            # vLLM's sampling log-probs: TRL's importance-sampling correction for the engine/trainer mismatch
            "logprobs": [e.logprobs for e in episodes] if with_logprobs else None,
            "fathom_reward": [sh.reward for sh in shaped],
            "fathom_info": [self._info(e, sh, tier) for e, sh in zip(episodes, shaped, strict=True)],
        }
        if self.config.rollout.train_subcalls:  # each episode's llm() answers (`subcall_rows` trains them)
            out["fathom_subcalls"] = [e.subcalls for e in episodes]
        for i, (task, episode, sh) in enumerate(zip(tasks, episodes, shaped, strict=True)):
            self._trace(step, i // g, i, task, episode, sh, "train")

        s = self.stats
        s.rollouts += len(episodes)
        s.generate_s += gen_stats.seconds
        s.rollout_s += wall
        s.sampled_tokens += gen_stats.tokens
        for episode in episodes:
            s.model_tokens += episode.model_tokens
            s.scored += 1
            assert episode.reward is not None
            s.reward_sum += episode.reward.total
            s.correct_sum += float(episode.reward.correct)
        return out

    def _info(self, episode: Episode, sh: Shaped, tier: int) -> dict[str, float]:
        info = {f"behaviour/{k}": v for k, v in episode.behaviour().items()}
        info["curriculum/tier"] = float(tier)
        info["curriculum/penalty_weight"] = self.state.penalty_weight
        info["curriculum/temperature"] = self.state.temperature
        b = episode.reward
        assert b is not None
        info["reward/env"] = b.total
        info["reward/shaped"] = sh.reward
        info["reward/penalty"] = sh.penalty
        info["reward/rank_bonus"] = sh.rank_bonus
        info["reward/token_cost"] = sh.token_cost
        info["accuracy"] = float(b.correct)
        for name in COMPONENTS:
            info[f"reward/{name}"] = float(b.components[name])
        return info

    def _trace(
        self, step: int, group: int, index: int, task: Any, episode: Episode, sh: Shaped | None, kind: str
    ) -> None:
        if self.traces is None:
            return
        self.traces.write(
            {
                "kind": kind,
                "step": step,
                "group": group,
                "index": index,
                "tier": self.source.tiers[self.state.tier].name,
                "task_id": task.id,
                "family": task.family,
                "length_tokens": task.length_tokens,
                "question": task.question,
                "gold": task.answer,
                "shaped": None if sh is None else sh.__dict__,
                "behaviour": episode.behaviour(),
                "conversation": self.tokenizer.decode(episode.prompt_ids + episode.completion_ids),
                "episode": episode.to_json(),
            }
        )

    def take_stats(self) -> StepStats:
        stats, self.stats = self.stats, StepStats()
        return stats


def fathom_reward(
    completions: list[Any],
    fathom_reward: list[float | None],
    fathom_info: list[dict[str, float]],
    **kwargs: Any,
) -> list[float | None]:
    """TRL reward function: the shaped reward from `FathomRollout`; logs each component and behaviour mean.

    Every rollout's value is logged on its own: TRL averages a metric as (sum of values) / (count of values)
    over every rank, so the logged figure is the mean over all rollouts of the step on all ranks. (One mean
    per rank would weigh a rank's rollouts by how many of them carry the key: ``accuracy`` and ``reward/*``
    exist only for rollouts the infrastructure did not fail.)"""
    log_metric = kwargs.get("log_metric")
    if log_metric is not None:
        for key in sorted({k for info in fathom_info for k in info}):
            for info in fathom_info:
                if key in info:
                    log_metric(key, info[key])
    return list(fathom_reward)
