"""TRL's ``rollout_func`` over FATHOM's rollout engine, the reward function, and per-rollout behaviour.

`FathomRollout(prompts, trainer)` gets this rank's generation batch: slot prompts, each repeated
``num_generations`` times in a row (one GRPO group). It resolves each slot to its task (`tasksource`), runs
every episode through `fathom.rollout.RolloutEngine` with the trainer's *current* weights (HF generate over
the unwrapped model), and returns exactly one rollout per prompt entry:

- ``prompt_ids`` / ``completion_ids`` token-exact, ``env_mask`` (1 = sampled, trained; 0 = environment reply,
  attended but masked out of the loss), ``logprobs`` None (no vLLM, so no importance-sampling correction);
- ``fathom_reward``: the shaped reward (`recipe.shape_group`, using the recipe state of this step), or None
  for an episode the *infrastructure* failed (TRL then leaves it out of the group baseline);
- ``fathom_info``: the reward components and behaviour of each rollout, which `fathom_reward_func` logs
  through TRL's ``log_metric`` (so they reach metrics.jsonl, TensorBoard and W&B with TRL's own metrics).

Every rollout is written whole to ``traces.jsonl``. Per-step sums for the recipe (mean reward, accuracy,
tokens) wait in `StepStats` until the callback reduces them across ranks. This module does not update the
recipe state or touch the optimiser.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fathom.env import EnvConfig, OpenAISubLM, RLMEnvironment
from fathom.policies.readers import expert_reader
from fathom.reward.compose import COMPONENTS
from fathom.rollout import ChatFormat, EngineSubLM, HFBackend, Rollout, RolloutConfig, RolloutEngine, Sampling
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

CTX_RE = re.compile(r"\bctx\b")


def behaviour(rollout: Rollout) -> dict[str, float]:
    """What the policy did in one episode (counts, and 0/1 flags that average to rates)."""
    turns = rollout.trace.get("turns", [])
    cells = [c for t in turns for c in t.get("cells", [])]
    subcalls = [s for t in turns for s in t.get("subcalls", [])]
    answered = rollout.end_reason == "answered"
    read_doc = any(CTX_RE.search(c.get("code", "")) for c in cells) or bool(subcalls)
    model_tokens = sum(rollout.env_mask)
    return {
        "turns": float(rollout.turns),
        "code_cells": float(len(cells)),
        "code_errors": float(sum(1 for c in cells if c.get("error") and not c.get("timed_out"))),
        "timeouts": float(sum(1 for c in cells if c.get("timed_out"))),
        "restarts": float(sum(1 for c in cells if c.get("restarted"))),
        "no_code_turns": float(sum(1 for t in turns if not t.get("cells"))),
        "subcalls": float(len(subcalls)),
        "llm_chars": float(sum(s.get("chunk_chars", 0) + len(s.get("prompt", "")) for s in subcalls)),
        "answered": float(answered),
        "blind_answer": float(answered and not read_doc),
        "hit_max_turns": float(rollout.end_reason == "max_turns" or rollout.end_reason == "max_iterations"),
        "hit_token_budget": float(rollout.end_reason == "token_budget"),
        "model_tokens": float(model_tokens),
        "env_tokens": float(len(rollout.env_mask) - model_tokens),
    }


def scored(rollout: Rollout) -> Scored | None:
    """The reward inputs of a finished episode; None when the infrastructure failed it."""
    b = rollout.breakdown
    if b is None or rollout.reward is None or (rollout.end_reason or "").startswith("error"):
        return None
    return Scored(
        total=float(b["total"]),
        token_component=float(b["components"]["token_budget"]),
        correct=bool(b["correct"]),
        score=float(b["score"]),
        model_tokens=sum(rollout.env_mask),
    )


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
        self.env_config = EnvConfig(
            max_iterations=r.max_turns,
            max_episode_tokens=r.max_total_tokens,
            max_depth=r.max_depth,
            sandbox=SandboxConfig(soft_timeout_s=r.cell_soft_timeout_s, hard_timeout_s=r.cell_hard_timeout_s),
            reward=config.reward,
        )
        self.engine_config = RolloutConfig(
            max_turns=r.max_turns,
            max_total_tokens=r.max_total_tokens,
            sub_sampling=Sampling(max_new_tokens=r.sub_max_new_tokens, temperature=0.0),
            sub_max_input_tokens=r.sub_max_input_tokens,
        )

    def sampling(self, temperature: float | None = None) -> Sampling:
        r = self.config.rollout
        t = self.state.temperature if temperature is None else temperature
        return Sampling(max_new_tokens=r.max_new_tokens, temperature=t, top_p=r.top_p, top_k=r.top_k)

    def run_episodes(
        self, trainer: Any, tasks: Sequence[Any], sampling: Sampling
    ) -> tuple[list[Rollout], TimedBackend]:
        """Every task's episode with the trainer's current weights; returns the rollouts and generation timing."""
        r = self.config.rollout
        in_lockstep = needs_lockstep(trainer, r.lockstep)
        # Lockstep needs HF generate's synced forwards: "auto" means plain there, whatever it means elsewhere
        mode = "plain" if in_lockstep and r.generation_mode == "auto" else r.generation_mode
        with policy_model(trainer) as model:
            # Kept across steps: the weights are updated in place, so a graph decoder's captures stay valid.
            if self._backend is None or self._backend.model is not model:
                self._backend = HFBackend(
                    model,
                    self.tokenizer,
                    mode=mode,
                    max_cache_len=r.max_cache_len,
                    graph_max_new=max(r.max_new_tokens, r.sub_max_new_tokens),  # turns and llm() replies
                    fuse=r.graph_fuse,
                )
            inner: Any = self._backend
            lockstep = None
            synced: Any = contextlib.nullcontext()
            device = trainer.accelerator.device
            if in_lockstep:
                lockstep = inner = LockstepBackend(inner, self.chat.prompt_ids("", "ok"), device=device)
                synced = synced_generation(model)
            timed = TimedBackend(inner, trainer.accelerator.autocast, device=device)
            sub_lm: Any = None
            engine_sub: EngineSubLM | None = None
            if r.sub_lm in ("policy", "base"):
                sub_lm = engine_sub = EngineSubLM(
                    timed,
                    self.chat,
                    self.engine_config.sub_sampling,
                    r.sub_max_input_tokens,
                    use_adapters=r.sub_lm == "policy",
                )
            elif r.sub_lm == "expert":
                sub_lm = expert_reader()
            elif r.sub_lm == "openai":
                sub_lm = OpenAISubLM(r.sub_lm_url, r.sub_lm_model, max_tokens=r.sub_max_new_tokens)
            env_config = self.env_config

            def env_factory() -> RLMEnvironment:
                return RLMEnvironment(env_config, sub_lm=sub_lm)

            engine = RolloutEngine(timed, self.chat, env_factory, self.engine_config, sub_lm=engine_sub)
            with synced:
                rollouts = engine.run_sync(list(tasks), sampling)
                if lockstep is not None:
                    lockstep.drain()
        return rollouts, timed

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        step = trainer.state.global_step + 1  # the optimizer step these rollouts train
        g = self.config.grpo.num_generations
        if len(prompts) % g:
            raise ValueError(f"rollout_func got {len(prompts)} prompts, not whole groups of {g}")
        slots = [parse_slot(p) for p in prompts]
        tier = self.state.tier
        tasks = [self.source.task(tier, step, s) for s in slots]
        started = time.perf_counter()
        rollouts, timed = self.run_episodes(trainer, tasks, self.sampling())
        wall = time.perf_counter() - started

        shaped: list[Shaped | None] = []
        for start in range(0, len(rollouts), g):
            group = [scored(r) for r in rollouts[start : start + g]]
            ok = [s for s in group if s is not None]
            it = iter(shape_group(ok, self.state.penalty_weight, self.config.penalty, self.config.reward))
            shaped += [None if s is None else next(it) for s in group]

        out: dict[str, Any] = {"prompt_ids": [], "completion_ids": [], "env_mask": [], "logprobs": None}
        rewards: list[float | None] = []
        infos: list[dict[str, float]] = []
        for i, (task, rollout, sh) in enumerate(zip(tasks, rollouts, shaped, strict=True)):
            prompt_ids, completion_ids, env_mask = (
                rollout.prompt_ids,
                rollout.completion_ids,
                rollout.env_mask,
            )
            if not prompt_ids or not completion_ids:  # the episode never started: a neutral, fully masked row
                prompt_ids = prompt_ids or self.chat.prompt_ids("", task.question)
                completion_ids, env_mask = [self.chat.eos_id], [0]
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["env_mask"].append(env_mask)
            rewards.append(None if sh is None else sh.reward)
            infos.append(self._info(rollout, sh, tier))
            self._trace(step, i // g, i, task, rollout, sh, "train")
        out["fathom_reward"], out["fathom_info"] = rewards, infos

        s = self.stats
        s.rollouts += len(rollouts)
        s.generate_s += timed.seconds
        s.rollout_s += wall
        for rollout in rollouts:
            s.model_tokens += sum(rollout.env_mask)
            if (sc := scored(rollout)) is not None:
                s.scored += 1
                s.reward_sum += sc.total
                s.correct_sum += float(sc.correct)
        return out

    def _info(self, rollout: Rollout, sh: Shaped | None, tier: int) -> dict[str, float]:
        info = {f"behaviour/{k}": v for k, v in behaviour(rollout).items()}
        info["rollout/infra_error"] = float(sh is None)
        info["curriculum/tier"] = float(tier)
        info["curriculum/penalty_weight"] = self.state.penalty_weight
        info["curriculum/temperature"] = self.state.temperature
        b = rollout.breakdown
        if sh is not None and b is not None:
            info["reward/env"] = float(b["total"])
            info["reward/shaped"] = sh.reward
            info["reward/penalty"] = sh.penalty
            info["reward/rank_bonus"] = sh.rank_bonus
            info["reward/token_cost"] = sh.token_cost
            info["accuracy"] = float(b["correct"])
            for name in COMPONENTS:
                info[f"reward/{name}"] = float(b["components"][name])
        return info

    def _trace(
        self, step: int, group: int, index: int, task: Any, rollout: Rollout, sh: Shaped | None, kind: str
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
                "end_reason": rollout.end_reason,
                "turns": rollout.turns,
                "env_reward": rollout.reward,
                "breakdown": rollout.breakdown,
                "shaped": None if sh is None else sh.__dict__,
                "behaviour": behaviour(rollout),
                "conversation": self.tokenizer.decode(rollout.prompt_ids + rollout.completion_ids),
                "trace": rollout.trace,
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
