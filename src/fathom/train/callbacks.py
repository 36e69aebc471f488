"""The GRPO trainer callback that runs the lab recipe between optimizer steps.

At the end of every step, on every rank and in the same order (so collectives match):

1. reduce this step's rollout sums across ranks; fold the mean reward (or accuracy) into the curriculum EMA
   (maybe advancing a tier) and take a dual-ascent step on the token-penalty weight;
2. poll the control file (main rank reads, all ranks receive the same update) and apply it at the next
   generation boundary; a new temperature also re-patches TRL's loss head, so the loss uses the temperature
   the rollouts were sampled with;
3. run the periodic eval when due;
4. ask for a checkpoint on the geometric / ``save_every`` schedule and at the last step.

Its ``on_log`` adds these values (timings, tokens/s, recipe state, eval) to the step's log record before any
reporter sees it, and writes the record to ``metrics.jsonl``. The callback is inserted first in the
trainer's callback list for that reason.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from transformers import TrainerCallback

from fathom.train import checkpoint
from fathom.train.config import TrainConfig
from fathom.train.control import ControlFile, ControlUpdate
from fathom.train.evalloop import evaluate
from fathom.train.recipe import RecipeState, curriculum_step, penalty_step, set_tier
from fathom.train.rollout_func import FathomRollout
from fathom.train.runlog import JsonlWriter
from fathom.train.tasksource import TaskSource

log = logging.getLogger("fathom.train")


def set_loss_temperature(trainer: Any, temperature: float) -> None:
    """Re-patch TRL's fused LM head so the GRPO loss scores tokens at the sampling temperature."""
    from trl.trainer.utils import add_fused_lm_head

    def repatch(model: Any, outputs: tuple[str, ...]) -> None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        vars(base).pop("forward", None)  # back to the class forward before wrapping again
        add_fused_lm_head(
            base,
            temperature=temperature,
            cast_lm_head_to_fp32=trainer.args.cast_lm_head_to_fp32,
            outputs=outputs,
        )

    repatch(trainer.accelerator.unwrap_model(trainer.model), ("log_probs", "entropy"))
    if trainer.ref_model is not None:
        repatch(trainer.ref_model, ("log_probs",))
    trainer.temperature = temperature


class FathomCallback(TrainerCallback):
    def __init__(
        self,
        config: TrainConfig,
        state: RecipeState,
        rollout: FathomRollout,
        source: TaskSource,
        metrics: JsonlWriter,
        control_file: ControlFile,
    ) -> None:
        self.config, self.recipe, self.rollout, self.source = config, state, rollout, source
        self.metrics, self.control_file = metrics, control_file
        self.trainer: Any = None  # set by fathom.train.grpo once the trainer exists
        self.pending: dict[str, Any] = {}
        self.pending_update: ControlUpdate | None = None
        self._eval_tasks: list[Any] | None = None
        self._step_started = 0.0
        self._train_started = time.perf_counter()

    # ---- per step ----------------------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._train_started = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_started = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = state.global_step
        step_s = time.perf_counter() - self._step_started
        self._update_recipe(step, step_s)
        self._poll_control(step)
        if step % self.config.grpo.num_iterations == 0 and self.pending_update is not None:
            self._apply(self.pending_update, step)
            self.pending_update = None
        every = self.config.eval.every
        if every and step % every == 0:
            self.pending.update(self.run_eval(step))
        if checkpoint.should_save(step, state.max_steps, self.config.checkpoint):
            control.should_save = True
        if self._out_of_time():
            log.info("step %d: run.max_minutes reached; saving a checkpoint and stopping", step)
            self._event(step, {"event": "time_limit", "max_minutes": self.config.run.max_minutes})
            control.should_save = control.should_training_stop = True

    def _out_of_time(self) -> bool:
        """Past `run.max_minutes`? Decided on the main process and shared, so every rank stops together."""
        limit = self.config.run.max_minutes
        if not limit:
            return False
        from accelerate.utils import broadcast_object_list

        over = [time.perf_counter() - self._train_started > limit * 60]
        broadcast_object_list(over, from_process=0)
        return bool(over[0])

    def _update_recipe(self, step: int, step_s: float) -> None:
        import torch

        trainer, recipe = self.trainer, self.recipe
        s = self.rollout.take_stats()
        local = torch.tensor(
            [
                s.rollouts,
                s.scored,
                s.reward_sum,
                s.correct_sum,
                s.model_tokens,
                s.generate_s,
                s.rollout_s,
                s.sampled_tokens,
                s.engine_calls,
            ],
            dtype=torch.float64,
            device=trainer.accelerator.device,
        )
        rollouts, scored, reward_sum, correct_sum, tokens, gen_s, roll_s, sampled, calls = (
            trainer.accelerator.reduce(local, reduction="sum").tolist()
        )
        # The slowest rank sets the pace (every rank waits for it at the first collective after the rollout)
        slowest = torch.tensor([s.generate_s, s.rollout_s], dtype=torch.float64, device=local.device)
        if trainer.accelerator.num_processes > 1:
            import torch.distributed as dist

            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        gen_max_s, roll_max_s = slowest.tolist()
        if rollouts == 0:  # no generation this step (num_iterations > 1 reuses the last batch)
            return
        world = trainer.accelerator.num_processes
        recipe.examples_seen += int(rollouts)
        recipe.model_tokens_seen += int(tokens)
        out = {
            "time/step_s": step_s,
            "progress/examples_seen": recipe.examples_seen,
            "progress/model_tokens_seen": recipe.model_tokens_seen,
        }
        out["time/rollout_s"] = roll_s / world  # the mean over ranks; *_max_s: the slowest rank
        out["time/generate_s"] = gen_s / world
        out["time/rollout_max_s"] = roll_max_s
        out["time/generate_max_s"] = gen_max_s
        out["time/env_s"] = max(0.0, (roll_s - gen_s) / world)
        out["time/optimise_s"] = max(0.0, step_s - roll_max_s)
        out["throughput/sampled_tokens_per_s"] = tokens / max(step_s, 1e-9)  # every rank's tokens
        # Everything the engine sampled (policy turns and llm() replies) per second it was generating
        out["throughput/generate_tokens_per_s"] = sampled / max(gen_s, 1e-9)
        # The engine's steps a rank (vLLM; batched generate calls on the HF path) and the mean time of one
        out["rollout/engine_calls"] = calls / world
        out["time/engine_call_ms"] = 1e3 * gen_s / max(calls, 1)
        out["world_size"] = world
        if scored:
            reward, accuracy = reward_sum / scored, correct_sum / scored
            value = accuracy if self.config.curriculum.metric == "accuracy" else reward
            if curriculum_step(recipe, value, self.config.curriculum, step):
                out["curriculum/advanced_to"] = recipe.tier
                log.info("step %d: curriculum advanced to tier %s", step, self.source.tiers[recipe.tier].name)
            recipe.penalty_weight = penalty_step(recipe.penalty_weight, accuracy, self.config.penalty)
            out["curriculum/ema"] = recipe.ema if recipe.ema is not None else value
        out["curriculum/steps_in_tier"] = recipe.steps_in_tier
        self.pending.update(out)

    def _poll_control(self, step: int) -> None:
        from accelerate.utils import broadcast_object_list

        acc = self.trainer.accelerator
        message: list[Any] = [None, None]
        if acc.is_main_process:
            message = list(self.control_file.poll(self.recipe.control_digest))
        if acc.num_processes > 1:
            broadcast_object_list(message, from_process=0)
        update, error = message
        if error:
            log.warning("control file: %s", error)
            self._event(step, {"event": "control_error", "error": error})
        if update is not None:
            self.pending_update = update

    def _apply(self, update: ControlUpdate, step: int) -> None:
        recipe = self.recipe
        if update.temperature is not None and update.temperature != recipe.temperature:
            recipe.temperature = update.temperature
            set_loss_temperature(self.trainer, update.temperature)
        if update.penalty_weight is not None:
            recipe.penalty_weight = update.penalty_weight
        if update.tier is not None and update.tier != recipe.tier:
            set_tier(recipe, update.tier, step)
        recipe.control_digest = update.digest
        log.info("step %d: control file applied %s", step, update.changes())
        self._event(step, {"event": "control_applied", **update.changes()})

    def _event(self, step: int, record: dict[str, Any]) -> None:
        if self.trainer.accelerator.is_main_process:
            self.metrics.write({"step": step, "time": time.time(), **record})

    # ---- eval --------------------------------------------------------------------------------------------
    def run_eval(self, step: int) -> dict[str, float]:
        e = self.config.eval
        if self._eval_tasks is None:
            self._eval_tasks = self.source.eval_set(
                e.tier, e.num_tasks, e.seed, self.config.data.eval_tasks or None
            )
        started = time.perf_counter()
        summary = evaluate(self.rollout, self.trainer, self._eval_tasks, e.temperature, e.seed, step)
        summary["eval/time_s"] = time.perf_counter() - started
        return summary

    # ---- logging -----------------------------------------------------------------------------------------
    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None:
            return
        logs.update(self.pending)
        self.pending = {}
        if state.is_world_process_zero:
            self.metrics.write({"step": state.global_step, "time": time.time(), **logs})
