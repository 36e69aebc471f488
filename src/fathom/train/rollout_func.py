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

With ``grpo.dynamic_sampling`` (DAPO's, within TRL's fixed batch) it rolls out ``ceil(oversample * groups)``
groups, the extra ones on fresh task slots (`extra_slots`), and returns the step's number of groups: those
with reward variance first (`select_groups`), since a zero-variance group has zero advantage and trains
nothing. The extra episodes cost little wall time: they run concurrently through the same engine.

Every episode is written whole to ``traces.jsonl``, with ``kept`` (whether its group was trained on). An
exception in our own code (environment, reward, engine) propagates and stops the step: no row is silently
dropped. Per-step sums for the recipe wait in
`StepStats` until the callback reduces them across ranks. This module does not update the recipe state or
touch the optimiser.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fathom.env import OpenAISubLM
from fathom.policies.readers import expert_reader
from fathom.reward.compose import COMPONENTS
from fathom.rollout import ChatFormat, Episode, HFBackend, RolloutConfig, Sampling
from fathom.rollout.service import GenerationService, RoutedService, ServiceStats
from fathom.rollout.wiring import build_engine, hf_service, running, vllm_service
from fathom.sandbox import SandboxConfig
from fathom.train.config import MAX_OVERSAMPLE, TrainConfig
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


def has_variance(rewards: Sequence[float]) -> bool:
    """Whether a group's rewards differ (TRL's zero-std test: a std within 1e-8 of zero)."""
    return len(rewards) > 1 and statistics.stdev(rewards) > 1e-8


def extra_slots(slots: Sequence[int], oversample: float) -> list[int]:
    """The task slots of the groups dynamic sampling rolls out beside this rank's `slots` (one per group).

    ``ceil(oversample * n)`` groups in all: extra ``k`` is replica ``k // n + 1`` of group ``k % n``, numbered
    ``-(slot * MAX_OVERSAMPLE + replica)``: below zero (dataset slots are >= 0), never another slot's, and the
    same on every rank and every run, so a resumed run draws the same extra tasks."""
    n = len(slots)
    extras = math.ceil(round(oversample * n, 9)) - n  # round: 1.1 * 10 is 11.000000000000002
    return [-(slots[k % n] * MAX_OVERSAMPLE + k // n + 1) for k in range(extras)]


def select_groups(variance: Sequence[bool], keep: int) -> list[int]:
    """The `keep` sampled groups to train on (indices; the first `keep` are the step's own groups).

    In order: the step's own groups with reward variance, then the extra groups with variance, then
    zero-variance groups (own first) as filler when too few have variance."""
    if not 0 < keep <= len(variance):
        raise ValueError(f"cannot keep {keep} of {len(variance)} sampled groups")
    own = [i for i in range(keep) if variance[i]]
    extra = [i for i in range(keep, len(variance)) if variance[i]]
    filler = [i for i in range(len(variance)) if not variance[i]]
    return (own + extra + filler)[:keep]


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
    # vLLM engine steps (one batched `generate` call each on the HF path): generate_s / engine_calls says
    # whether a slow step is many engine steps (long episodes) or slow ones (host overhead)
    engine_calls: int = 0
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
        self._reader_service: GenerationService | None = None  # rollout.sub_lm = "model", loaded once
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
            max_new_tokens=r.max_new_tokens,
            temperature=t,
            top_p=r.top_p,
            top_k=r.top_k,
            logprobs=logprobs,
            repetition_penalty=r.repetition_penalty,
        )

    def _reader(self) -> Any:
        r = self.config.rollout
        if r.sub_lm in ("policy", "base"):
            return r.sub_lm
        if r.sub_lm == "model":  # the engine asks adapter-off; `RoutedService` sends that to the reader model
            return "base"
        if r.sub_lm == "expert":
            return expert_reader()
        if r.sub_lm == "openai":
            return OpenAISubLM(r.sub_lm_url, r.sub_lm_model, max_tokens=r.sub_max_new_tokens)
        return None

    def reader_service(self, device: Any) -> GenerationService:
        """The frozen reader of ``rollout.sub_lm = "model"`` (`rollout.sub_lm_model`): HF generate on the
        trainer's device, loaded on first use; a second vLLM engine beside TRL's is not measured."""
        if self._reader_service is None:
            from fathom.eval.policies import check_reader_vocabulary, load_model_engine

            r, m = self.config.rollout, self.config.model
            context = r.sub_max_input_tokens + r.sub_max_new_tokens
            engine = check_reader_vocabulary(
                load_model_engine(r.sub_lm_model, m.dtype, str(device), "plain", context),
                r.sub_lm_model, self.tokenizer, m.name,
            )  # fmt: skip
            engine.model.eval()
            engine.model.requires_grad_(False)
            self._reader_service = engine.service
        return self._reader_service

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
                service = vllm_service(trainer.vllm_generation.llm, base=hf if r.sub_lm == "base" else None)
                sampling = replace(sampling, logprobs=True)
            if r.sub_lm == "model":
                service = RoutedService(service, self.reader_service(device), base_adapter=True)
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
        groups = len(prompts) // g
        dynamic = self.config.grpo.dynamic_sampling
        if dynamic:
            slots += [s for s in extra_slots(slots[::g], self.config.grpo.oversample) for _ in range(g)]
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

        variance = [has_variance([sh.reward for sh in shaped[i : i + g]]) for i in range(0, len(shaped), g)]
        kept = select_groups(variance, groups) if dynamic else list(range(groups))
        rows = [k * g + j for k in kept for j in range(g)]
        infos = [self._info(episodes[i], shaped[i], tier, tasks[i]) for i in rows]
        if dynamic:
            sampled = {
                "dynamic/zero_std_sampled": 1 - sum(variance) / len(variance),
                "dynamic/zero_std_kept": 1 - sum(variance[k] for k in kept) / len(kept),
                "dynamic/groups_sampled": float(len(variance)),  # per rank
                "dynamic/accuracy_sampled": sum(e.correct for e in episodes) / len(episodes),
            }
            for info in infos:
                info.update(sampled)
        out_eps = [episodes[i] for i in rows]
        with_logprobs = all(e.logprobs is not None for e in out_eps)
        out: dict[str, Any] = {
            "prompt_ids": [e.prompt_ids for e in out_eps],
            "completion_ids": [e.completion_ids for e in out_eps],
            "env_mask": [e.env_mask for e in out_eps],
            # vLLM's sampling log-probs: TRL's importance-sampling correction for the engine/trainer mismatch
            "logprobs": [e.logprobs for e in out_eps] if with_logprobs else None,
            "fathom_reward": [shaped[i].reward for i in rows],
            "fathom_info": infos,
        }
        if self.config.rollout.train_subcalls:  # each episode's llm() answers (`subcall_rows` trains them)
            out["fathom_subcalls"] = [e.subcalls for e in out_eps]
        kept_rows = set(rows)
        for i, (task, episode, sh) in enumerate(zip(tasks, episodes, shaped, strict=True)):
            self._trace(step, i // g, i, task, episode, sh, "train", kept=i in kept_rows)

        s = self.stats
        s.rollouts += len(rows)  # trained on
        s.generate_s += gen_stats.seconds
        s.rollout_s += wall
        s.sampled_tokens += gen_stats.tokens
        s.engine_calls += gen_stats.calls
        s.model_tokens += sum(e.model_tokens for e in out_eps)
        # The recipe's reward and accuracy means cover every sampled rollout: the kept ones were chosen for
        # their reward variance, so their mean is not the policy's
        for episode in episodes:
            s.scored += 1
            assert episode.reward is not None
            s.reward_sum += episode.reward.total
            s.correct_sum += float(episode.reward.correct)
        return out

    def _info(self, episode: Episode, sh: Shaped, tier: int, task: Any) -> dict[str, float]:
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
        # Only on this family's (tier's) rollouts: TRL's mean per key is then the family's (tier's) accuracy
        info[f"accuracy/family/{task.family}"] = float(b.correct)
        info[f"accuracy/tier/{self.source.tiers[tier].name}"] = float(b.correct)
        for name in COMPONENTS:
            info[f"reward/{name}"] = float(b.components[name])
        return info

    def _trace(
        self,
        step: int,
        group: int,
        index: int,
        task: Any,
        episode: Episode,
        sh: Shaped | None,
        kind: str,
        kept: bool = True,
    ) -> None:
        if self.traces is None:
            return
        self.traces.write(
            {
                "kind": kind,
                "step": step,
                "group": group,
                "index": index,
                "kept": kept,  # False: a zero-variance group dynamic sampling rolled out but did not train on
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
