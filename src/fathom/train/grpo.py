"""``fathom grpo``: GRPO (TRL ``GRPOTrainer`` + our ``rollout_func``) with the environment in the rollout loop.

    fathom grpo --config configs/tiny-cpu.toml [--section.key=value ...]

`build_grpo(config)` assembles a run: the policy (`policy`), the slot dataset and task source
(`tasksource`), the rollout function and reward (`rollout_func`), the recipe callback (`callbacks`) and
`FathomGRPOTrainer`, whose changes to TRL are how a checkpoint is written: atomically (`checkpoint`),
with the recipe state and the resolved config inside; with ``rollout.train_subcalls``, the policy's `llm()`
answers appended to each generation batch as rows of their own (`subcall_rows`); and, with ``grpo.log_kl``,
a ``kl`` metric to the adapter-off model at beta = 0 (`reference_kl`). `run_grpo(config)` trains it —
resuming from the newest checkpoint in the run dir when ``run.resume = "auto"`` — then exports the adapter
and a merged 16-bit model to ``RUN/final``.

Run dir: ``config.toml``, ``metrics.jsonl``, ``traces.jsonl``, ``control.json`` (yours to write),
``checkpoint-N/``, ``final/``. See configs/accelerate/README.md for multi-GPU launches.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.rollout.vllm_options import VLLMEngineOptions, engine_kwargs, merged_kwargs
from fathom.train import checkpoint
from fathom.train.cli import add_config_arguments, config_from_args
from fathom.train.config import ConfigError, TrainConfig
from fathom.train.configfile import dump_toml
from fathom.train.control import ControlFile
from fathom.train.recipe import RecipeState, initial_state
from fathom.train.reference_kl import check_log_kl
from fathom.train.runlog import JsonlWriter, report_to, truncate_after
from fathom.train.tasksource import TaskSource, slot_prompt


def _trainer_class() -> type:
    from transformers.trainer import TRAINER_STATE_NAME
    from trl import GRPOTrainer

    from fathom.train.reference_kl import ReferenceKL

    class FathomGRPOTrainer(ReferenceKL, GRPOTrainer):
        """TRL's GRPOTrainer with atomic checkpoints that carry FATHOM's recipe state and config; with
        ``rollout.train_subcalls`` the policy's `llm()` answers trained as rows of their own; ``kl`` to the
        adapter-off model logged with ``grpo.log_kl`` (`fathom.train.reference_kl`); with ``grpo.group_by_length``
        micro-batches of similar lengths and forwards cut to their longest row (`fathom.train.padding`)."""

        fathom_state: Callable[[], dict[str, Any]] = staticmethod(dict)
        fathom_config_toml: str = ""
        fathom_keep_last: int = 3
        fathom_train_subcalls: bool = False
        fathom_max_subcall_rows: int = 0
        fathom_group_by_length: bool = False

        def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
            if not (self.fathom_group_by_length and self.model.training):
                return super()._prepare_inputs(generation_batch)
            from fathom.train.padding import length_grouped

            # TRL's train branch, with micro-batches grouped by length in place of its shuffle
            steps = self.args.steps_per_generation
            if self._step % (steps * self.num_iterations) == 0 or self._buffered_inputs is None:
                batch = self._generate_and_score_completions(generation_batch)
                self._buffered_inputs = length_grouped(batch, steps)
            return self._buffered_inputs[self._step % steps]

        def _get_per_token_logps_and_entropies(
            self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, batch_size: Any = None,
            compute_entropy: bool = False, compute_aux_loss: bool = False, **extra: Any,
        ) -> Any:  # fmt: skip
            parent = super()._get_per_token_logps_and_entropies
            multimodal = any(v is not None for v in extra.values())
            if not self.fathom_group_by_length or compute_aux_loss or multimodal:
                return parent(
                    model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                    compute_aux_loss, **extra,
                )  # fmt: skip
            from fathom.train.padding import trimmed_logps

            def forward(ids: Any, mask: Any, keep: int) -> Any:
                return parent(model, ids, mask, keep, compute_entropy=compute_entropy)

            logps, entropies = trimmed_logps(forward, input_ids, attention_mask, logits_to_keep, batch_size)
            return logps, entropies, None

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            batch = super()._generate_and_score_completions(inputs)
            if not (self.fathom_train_subcalls and self.model.training):
                return batch
            from fathom.train.subcall_rows import add_subcall_rows

            return add_subcall_rows(self, inputs, batch, self.fathom_max_subcall_rows)

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            run_dir = Path(self.args.output_dir)
            final = run_dir / f"{checkpoint.PREFIX}{self.state.global_step}"
            staging = checkpoint.staging_dir(final)
            self.store_flos()
            if self.args.should_save and staging.exists():
                shutil.rmtree(staging)
            self.accelerator.wait_for_everyone()
            self.save_model(str(staging), _internal_call=True)
            self._save_optimizer_and_scheduler(str(staging))
            self._save_scaler(str(staging))
            self._save_rng_state(str(staging))
            if self.args.should_save:
                self.state.save_to_json(str(staging / TRAINER_STATE_NAME))
                checkpoint.write_state(staging, {"step": self.state.global_step, **self.fathom_state()})
                (staging / "config.toml").write_text(self.fathom_config_toml, encoding="utf-8")
            self.accelerator.wait_for_everyone()
            if self.args.should_save:
                checkpoint.commit(staging, final)
                checkpoint.prune(run_dir, self.fathom_keep_last)
            self.accelerator.wait_for_everyone()

    return FathomGRPOTrainer


@dataclass
class GRPORun:
    config: TrainConfig
    run_dir: Path
    trainer: Any
    rollout: Any
    recipe: RecipeState
    callback: Any
    resume_from: Path | None


def resume_point(config: TrainConfig, run_dir: Path) -> Path | None:
    setting = config.run.resume
    found = checkpoint.latest(run_dir)
    if setting == "auto":
        return found
    if setting == "never":
        if found is not None:
            raise ConfigError(
                f"{run_dir} already holds {found.name}: use run.resume = 'auto' or a new run.run_dir"
            )
        return None
    path = Path(setting)
    if not (path / checkpoint.STATE_FILE).exists():
        raise ConfigError(f"run.resume = {setting!r} is not a FATHOM checkpoint directory")
    return path


def wants_vllm(config: TrainConfig, device: str) -> bool:
    """Whether rollouts generate through vLLM: asked for, or "auto" on a GPU where vLLM is installed."""
    import importlib.util

    mode = config.rollout.generation_mode
    installed = importlib.util.find_spec("vllm") is not None
    if mode == "vllm":
        if not installed:
            raise ConfigError(
                "rollout.generation_mode = 'vllm' but vLLM is not installed (pip install 'fathom-rlm[vllm]')"
            )
        if device == "cpu":
            raise ConfigError("rollout.generation_mode = 'vllm' needs a GPU: use 'plain' on a CPU")
        return True
    return mode == "auto" and installed and device != "cpu"


def vllm_arguments(config: TrainConfig, device: str) -> dict[str, Any]:
    """GRPOConfig's vLLM settings: TRL's colocated engine, which TRL syncs (LoRA merged) before each rollout."""
    if not wants_vllm(config, device):
        return {"use_vllm": False}
    r = config.rollout
    return {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": r.vllm_gpu_memory_utilization,
        "vllm_max_model_length": r.vllm_max_model_len,
        "vllm_enable_sleep_mode": False,
    }


@contextlib.contextmanager
def colocated_engine(options: VLLMEngineOptions) -> Iterator[None]:
    """While TRL builds its colocated engine: `options` (``rollout.vllm_*``) laid over TRL's own arguments.

    TRL 1.16 fixes the engine's arguments (``max_num_batched_tokens=4096``, its own ``max_num_seqs``, no
    KV-cache size, vLLM's default scheduling) and offers no way to pass others. It builds the engine with
    ``vllm.LLM`` as imported in `trl.generation.vllm_generation`, so that name is wrapped for the duration of
    the trainer's construction only; our values win over TRL's, and the merged set is checked as vLLM would
    (`fathom.rollout.vllm_options.merged_kwargs`). Options all at their defaults wrap nothing."""
    if not engine_kwargs(options):
        yield
        return
    import trl.generation.vllm_generation as generation

    original = generation.LLM

    def build(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **merged_kwargs(kwargs, options))

    generation.LLM = build
    try:
        yield
    finally:
        generation.LLM = original


def build_grpo(
    config: TrainConfig, extra_reward_funcs: Sequence[Callable[..., list[float | None]]] = ()
) -> GRPORun:
    """Everything for one GRPO run, resumed state included; call ``run.trainer.train(...)`` to train."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is the documented path we chose
    from datasets import Dataset
    from transformers import set_seed
    from trl import GRPOConfig

    from fathom.train.callbacks import FathomCallback, set_loss_temperature
    from fathom.train.generation import needs_lockstep
    from fathom.train.nonfinite import SkipNonFiniteSteps
    from fathom.train.policy import load_policy, process_state, use_bf16
    from fathom.train.rollout_func import FathomRollout, fathom_reward

    if not config.run.run_dir:
        raise ConfigError("run.run_dir is empty: say where the run goes")
    check_log_kl(config)
    device, dist = process_state(config.run.device, config.run.gpu_memory_fraction)
    run_dir = Path(config.run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    resume_from = resume_point(config, run_dir)
    recipe = initial_state(config.curriculum, config.penalty, config.rollout.temperature)
    if resume_from is not None:
        saved = checkpoint.read_state(resume_from)
        recipe = RecipeState.from_dict(saved["recipe"])
    if dist.is_main_process:
        checkpoint.clean_stale(run_dir)
        (run_dir / "config.toml").write_text(dump_toml(config), encoding="utf-8")
        if resume_from is not None:  # the killed run's lines after its checkpoint are not part of the curve
            step = checkpoint.read_state(resume_from)["step"]
            for name in ("metrics.jsonl", "traces.jsonl"):
                truncate_after(run_dir / name, step)
    dist.wait_for_everyone()

    set_seed(config.run.seed)  # before the model: a fresh LoRA adapter initialises the same way every run
    model, tokenizer = load_policy(config.model, device)
    g = config.grpo
    source = TaskSource(config.curriculum.tiers, config.run.seed, config.data.train_tasks or None)
    traces_name = "traces.jsonl" if dist.is_main_process else f"traces.rank{dist.process_index}.jsonl"
    traces = JsonlWriter(run_dir / traces_name, enabled=config.logging.traces)
    rollout = FathomRollout(config, tokenizer, source, recipe, traces)
    # One slot per group the whole run can consume: the run is a single pass over the dataset.
    generations = -(-g.max_steps // g.num_iterations)
    groups_per_generation = g.per_device_train_batch_size * g.gradient_accumulation_steps * dist.num_processes
    slots = max(1, generations * groups_per_generation // g.num_generations)
    dataset = Dataset.from_dict({"prompt": [slot_prompt(i) for i in range(slots)]})
    args = GRPOConfig(
        output_dir=str(run_dir),
        max_steps=g.max_steps,
        learning_rate=g.learning_rate,
        lr_scheduler_type=g.lr_scheduler,
        warmup_steps=g.warmup_steps,
        weight_decay=g.weight_decay,
        max_grad_norm=g.max_grad_norm,
        optim=g.optim,
        per_device_train_batch_size=g.per_device_train_batch_size,
        gradient_accumulation_steps=g.gradient_accumulation_steps,
        num_generations=g.num_generations,
        num_iterations=g.num_iterations,
        max_completion_length=config.rollout.max_total_tokens,
        temperature=config.rollout.temperature,
        top_p=config.rollout.top_p,
        top_k=config.rollout.top_k,
        loss_type=g.loss_type,
        beta=g.beta,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon_high,
        scale_rewards=g.scale_rewards,
        mask_truncated_completions=g.mask_truncated_completions,
        **vllm_arguments(config, device),
        vllm_importance_sampling_mode=g.vllm_importance_sampling,
        bf16=use_bf16(g.bf16, device),
        use_cpu=device == "cpu",
        gradient_checkpointing=config.model.gradient_checkpointing,
        seed=config.run.seed,
        logging_steps=1,
        save_strategy="no",  # FathomCallback decides (geometric schedule + save_every + last step)
        report_to=report_to(config.logging, run_dir) or "none",
        disable_tqdm=not config.logging.progress,
        remove_unused_columns=False,
        log_completions=False,
    )
    trainer_cls = _trainer_class()
    with colocated_engine(config.rollout.vllm_engine() if args.use_vllm else VLLMEngineOptions()):
        trainer = trainer_cls(
            model=model,
            reward_funcs=[fathom_reward, *extra_reward_funcs],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=rollout,
        )
    if trainer.accelerator.num_processes != dist.num_processes:  # the slot count above assumed dist's world
        raise RuntimeError(
            f"the trainer runs {trainer.accelerator.num_processes} processes but the run was set up for "
            f"{dist.num_processes}: launch with accelerate/torchrun and a matching run.device"
        )
    mode = config.rollout.generation_mode
    if needs_lockstep(trainer, config.rollout.lockstep) and args.use_vllm:
        raise ConfigError(
            "vLLM generation under lockstep (FSDP, or rollout.lockstep = 'on') is not supported: every forward "
            "is a collective there; use rollout.generation_mode = 'plain'"
        )
    if needs_lockstep(trainer, config.rollout.lockstep) and mode not in ("auto", "plain"):
        raise ConfigError(
            f"rollout.generation_mode = {mode!r} under lockstep generation (FSDP, or "
            "rollout.lockstep = 'on'): every forward is a collective there, which only plain HF generate keeps "
            "in step across ranks (synced_gpus); use rollout.generation_mode = 'plain'"
        )
    if dist.num_processes > 1 and g.per_device_train_batch_size % g.num_generations:
        raise ConfigError(
            f"with {dist.num_processes} processes, grpo.per_device_train_batch_size "
            f"({g.per_device_train_batch_size}) must be a multiple of grpo.num_generations ({g.num_generations}) "
            "so that no GRPO group spans two ranks"
        )
    trainer.fathom_state = lambda: {"recipe": recipe.to_dict()}
    trainer.fathom_config_toml = dump_toml(config)
    trainer.fathom_keep_last = config.checkpoint.keep_last
    trainer.fathom_train_subcalls = config.rollout.train_subcalls
    trainer.fathom_max_subcall_rows = config.rollout.max_subcall_rows
    trainer.fathom_group_by_length = g.group_by_length
    trainer.fathom_log_kl = g.log_kl
    names = [t.name for t in config.curriculum.tiers]
    control = ControlFile(run_dir / "control.json", names, (config.penalty.min, config.penalty.max))
    metrics = JsonlWriter(run_dir / "metrics.jsonl", enabled=dist.is_main_process)
    callback = FathomCallback(config, recipe, rollout, source, metrics, control)
    callback.trainer = trainer
    trainer.callback_handler.callbacks.insert(0, callback)  # its on_log enriches the record reporters see
    trainer.fathom_nonfinite = SkipNonFiniteSteps()
    trainer.add_callback(trainer.fathom_nonfinite)
    if recipe.temperature != config.rollout.temperature:  # a control file changed it before the checkpoint
        set_loss_temperature(trainer, recipe.temperature)
    return GRPORun(config, run_dir, trainer, rollout, recipe, callback, resume_from)


def train_run(run: GRPORun) -> dict[str, Any]:
    """Train a built run (resuming if it has a checkpoint), export, and return a summary (RUN/summary.json)."""
    from fathom.train.policy import merge_base

    trainer, config = run.trainer, run.config
    result = trainer.train(resume_from_checkpoint=str(run.resume_from) if run.resume_from else None)
    exported: dict[str, str] = {}
    full_state = None
    if getattr(trainer, "is_fsdp_enabled", False):  # sharded parameters: gather them, every rank together
        full_state = trainer.accelerator.get_state_dict(trainer.model)
    if trainer.accelerator.is_main_process:
        model = trainer.accelerator.unwrap_model(trainer.model)
        exported = checkpoint.export(
            model,
            trainer.processing_class,
            run.run_dir / "final",
            merge_base(config.model),
            config.checkpoint,
            state_dict=full_state,
        )
    trainer.accelerator.wait_for_everyone()  # no rank leaves (and tears down the group) before the export
    summary = {
        "steps": trainer.state.global_step,
        "resumed_from": str(run.resume_from) if run.resume_from else None,
        "train_loss": result.training_loss,
        "recipe": run.recipe.to_dict(),
        "num_input_tokens_seen": trainer.state.num_input_tokens_seen,
        "skipped_nonfinite_steps": trainer.fathom_nonfinite.skipped,
        "exported": exported,
    }
    if trainer.accelerator.is_main_process:
        (run.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if run.rollout.traces is not None:
        run.rollout.traces.close()
    run.callback.metrics.close()
    return summary


def run_grpo(
    config: TrainConfig, extra_reward_funcs: Sequence[Callable[..., list[float | None]]] = ()
) -> dict[str, Any]:
    """`build_grpo` then `train_run`."""
    return train_run(build_grpo(config, extra_reward_funcs))


def main(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if config is None:  # --print-config
        return 0
    summary = run_grpo(config)
    print(json.dumps({k: summary[k] for k in ("steps", "resumed_from", "exported")}, indent=2))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "grpo",
        help="GRPO with the RLM environment in the rollout loop",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_arguments(parser, default_run_dir="runs/grpo")
    parser.set_defaults(func=main)
