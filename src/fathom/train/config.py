"""Training configuration: every knob of `fathom sft`, `fathom grpo` and `fathom smoke`, in one place.

A recipe is one TOML file under ``configs/`` with one table per section below (``[model]``, ``[grpo]``,
``[[curriculum.tiers]]``, ...). Each section validates its own values on construction and `TrainConfig`
the rules that span sections; a bad value raises `ConfigError` naming the key and what is allowed. Reading
TOML, command-line overrides and writing the resolved config back are `fathom.train.configfile`.

Cross-field rules that need the world size (whole GRPO groups per rank) are checked when the trainer is
built (`fathom.train.grpo`). This module holds no training logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fathom.reward.config import RewardConfig
from fathom.rollout.backends import MODES
from fathom.rollout.vllm_options import ASYNC_SCHEDULING, VLLMEngineOptions


class ConfigError(ValueError):
    """The configuration is invalid; the message says which key and what is allowed."""


def _one_of(section: str, name: str, value: Any, allowed: Sequence[Any]) -> None:
    if value not in allowed:
        raise ConfigError(f"{section}.{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")


def _positive(section: str, obj: Any, *names: str, allow_zero: bool = False) -> None:
    for name in names:
        value = getattr(obj, name)
        if value < 0 or (value == 0 and not allow_zero):
            raise ConfigError(f"{section}.{name} must be {'>= 0' if allow_zero else '> 0'}; got {value}")


@dataclass(frozen=True)
class RunConfig:
    run_dir: str = ""  # everything a run makes goes here; empty: runs/<command>
    seed: int = 0
    device: str = "auto"  # auto (cuda when available) | cpu | cuda
    resume: str = "auto"  # auto: the newest checkpoint in run_dir, if any | never | a checkpoint path
    # GRPO: stop after this many minutes of training (checkpoint, then the usual export); 0 = no limit.
    # For leases with a hard wall-clock limit per command: the next command resumes from the checkpoint.
    max_minutes: float = 0.0
    # This process's share of the GPU's memory (torch's caching allocator, which also holds a colocated vLLM
    # engine's weights and KV cache); 0 = no cap. Runs that share one GPU each get their own share, so the one
    # that outgrows it fails alone instead of taking the memory another run needs.
    gpu_memory_fraction: float = 0.0

    def __post_init__(self) -> None:
        _one_of("run", "device", self.device, ("auto", "cpu", "cuda"))
        _positive("run", self, "max_minutes", allow_zero=True)
        if not 0.0 <= self.gpu_memory_fraction <= 1.0:
            raise ConfigError(f"run.gpu_memory_fraction must be in [0, 1], got {self.gpu_memory_fraction}")


@dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny-smol"  # offline name, local path or hub id (fathom.models.resolve_model_dir)
    dtype: str = "float32"  # weights in memory; training autocasts to bf16 on GPUs (grpo.bf16)
    chat: bool = True
    init_from: str = ""  # an SFT result to start from: an adapter dir or a full model dir
    lora: bool = True
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ("all-linear",)
    load_in_4bit: bool = False  # QLoRA; exported merged weights are always 16-bit (see checkpoint.export)
    gradient_checkpointing: bool = False

    def __post_init__(self) -> None:
        _one_of("model", "dtype", self.dtype, ("float32", "bfloat16", "float16"))
        if self.load_in_4bit and not self.lora:
            raise ConfigError("model.load_in_4bit needs model.lora = true (4-bit weights cannot be trained)")
        _positive("model", self, "lora_r", "lora_alpha")


@dataclass(frozen=True)
class DataConfig:
    train_tasks: str = ""  # a train.jsonl to draw tasks from (filtered by tier); empty: generate on the fly
    eval_tasks: str = ""  # a fixed eval.jsonl; empty: generated from the eval tier and eval.seed


@dataclass(frozen=True)
class RolloutSection:
    max_turns: int = 6
    max_total_tokens: int = 4096  # completion side: model turns + environment replies
    max_new_tokens: int = 512  # per model turn
    temperature: float = 1.0
    top_p: float = 1.0  # keep 1 / top_k 0 for RL: truncated sampling biases the policy gradient
    top_k: int = 0
    # Of the policy's turns (CTRL-style, as `fathom eval --repetition-penalty`; 1.0 = off). GRPO's log-probs
    # are the unpenalised model's, so any other value makes its samples off-policy, and TRL's vLLM
    # importance-sampling correction does not see the penalty: keep 1.0 for GRPO unless measured.
    repetition_penalty: float = 1.0
    # auto: vLLM (TRL's colocated engine) on a GPU where vLLM is installed, else HF generate (plain)
    generation_mode: str = "auto"  # auto | vllm | plain | static
    max_cache_len: int = 8192  # static mode
    vllm_gpu_memory_utilization: float = 0.3  # the colocated engine's share of the GPU (weights + KV cache)
    vllm_max_model_len: int = 8192  # prompt + completion, for the engine's KV cache
    # > 0: a KV cache of this many GiB, sized without vLLM's start-up memory profile, which aborts when another
    # process on the same GPU frees memory while it runs (runs and evaluations sharing one GPU); 0 = profiled
    vllm_kv_cache_gib: float = 0.0
    # The engine's scheduler (`fathom.rollout.vllm_options`): async scheduling auto (vLLM's default, on for
    # TRL's engine) | on | off; tokens and sequences one engine step may hold, 0 = TRL's (4,096 tokens,
    # per-device batch x steps per generation sequences)
    vllm_async_scheduling: str = "auto"
    vllm_max_num_batched_tokens: int = 0
    vllm_max_num_seqs: int = 0
    # > 0: n-gram speculative decoding, up to this many proposed tokens a step (the model's own outputs);
    # slower for GRPO's sampling on the H200 (bench/RESULTS.md), so off
    vllm_ngram_speculative_tokens: int = 0
    # continuous: each turn goes to the engine when ready; turns: every live episode's turn in one batch
    # (reproducible samples with HF generate: exact resume, ranks that agree). auto: continuous with vLLM,
    # turns with HF generate
    batching: str = "auto"
    # policy | base (adapters off) | model (a second model, frozen: a reader trained apart) | expert (simulated
    # reader) | openai | none
    sub_lm: str = "policy"
    sub_lm_url: str = ""  # openai only: http://host:port/v1
    # openai: the served model's name; model: the reader's name or directory (with the policy's vocabulary)
    sub_lm_model: str = ""
    sub_max_new_tokens: int = 128
    sub_max_input_tokens: int = 2048
    max_depth: int = 1
    cell_soft_timeout_s: float = 10.0
    cell_hard_timeout_s: float = 15.0
    lockstep: str = "auto"  # every rank makes the same number of generate calls: auto (FSDP) | on | off
    # Train the policy's own llm() answers as sequences of their own, each with its episode's advantage
    # (`fathom.train.subcall_rows`); they are then sampled like turns (rollout temperature), not greedily
    train_subcalls: bool = False
    # per rank and generation batch; 0 = as many as its episode rows. Over it, whole sub-calls are dropped
    # round-robin (each episode keeps its first ones first)
    max_subcall_rows: int = 0

    def vllm_engine(self) -> VLLMEngineOptions:
        """The vLLM engine options these keys set (for TRL's colocated engine and `VLLMBackend`)."""
        return VLLMEngineOptions(
            async_scheduling=self.vllm_async_scheduling,
            max_num_batched_tokens=self.vllm_max_num_batched_tokens,
            max_num_seqs=self.vllm_max_num_seqs,
            kv_cache_gib=self.vllm_kv_cache_gib,
            ngram_speculative_tokens=self.vllm_ngram_speculative_tokens,
        )

    def __post_init__(self) -> None:
        _positive(
            "rollout", self, "max_turns", "max_total_tokens", "max_new_tokens", "sub_max_new_tokens",
            "repetition_penalty",
        )  # fmt: skip
        _positive(
            "rollout", self, "temperature", "top_k", "max_subcall_rows", "vllm_kv_cache_gib", allow_zero=True
        )
        _positive(
            "rollout", self, "vllm_max_num_batched_tokens", "vllm_max_num_seqs", "vllm_ngram_speculative_tokens",
            allow_zero=True,
        )  # fmt: skip
        _one_of("rollout", "vllm_async_scheduling", self.vllm_async_scheduling, ASYNC_SCHEDULING)
        tokens, seqs = self.vllm_max_num_batched_tokens, self.vllm_max_num_seqs
        if tokens and seqs and tokens < seqs:
            raise ConfigError(
                f"rollout.vllm_max_num_batched_tokens ({tokens}) must be >= rollout.vllm_max_num_seqs ({seqs}): "
                "vLLM schedules one token a step for every decoding sequence"
            )
        _one_of("rollout", "generation_mode", self.generation_mode, ("auto", "vllm", *MODES))
        _one_of("rollout", "batching", self.batching, ("auto", "continuous", "turns"))
        if not 0 < self.vllm_gpu_memory_utilization < 1:
            raise ConfigError("rollout.vllm_gpu_memory_utilization must be in (0, 1)")
        _one_of("rollout", "sub_lm", self.sub_lm, ("policy", "base", "model", "expert", "openai", "none"))
        _one_of("rollout", "lockstep", self.lockstep, ("auto", "on", "off"))
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"rollout.top_p must be in (0, 1]; got {self.top_p}")
        if self.sub_lm == "openai" and not (self.sub_lm_url and self.sub_lm_model):
            raise ConfigError("rollout.sub_lm = 'openai' needs rollout.sub_lm_url and rollout.sub_lm_model")
        if self.sub_lm == "model" and not self.sub_lm_model:
            raise ConfigError(
                "rollout.sub_lm = 'model' needs rollout.sub_lm_model: the reader's name or directory"
            )
        if not 0 < self.cell_soft_timeout_s < self.cell_hard_timeout_s:
            raise ConfigError("need 0 < rollout.cell_soft_timeout_s < rollout.cell_hard_timeout_s")
        if not 0 <= self.max_depth <= 4:
            raise ConfigError(f"rollout.max_depth must be in 0..4 (got {self.max_depth})")
        if self.train_subcalls and self.sub_lm != "policy":
            raise ConfigError(
                f"rollout.train_subcalls needs rollout.sub_lm = 'policy' (got {self.sub_lm!r}): only the "
                "policy's own llm() answers can be trained"
            )


MAX_OVERSAMPLE = 8  # extra task slots are numbered per original slot, at most this many groups each


@dataclass(frozen=True)
class GRPOSection:
    max_steps: int = 100
    learning_rate: float = 1e-5
    lr_scheduler: str = "constant_with_warmup"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    num_generations: int = 8  # rollouts per task (one GRPO group)
    per_device_train_batch_size: int = 8  # rollouts per micro-batch on each device
    gradient_accumulation_steps: int = 1
    num_iterations: int = 1  # optimisation passes over each generation batch
    loss_type: str = "dapo"
    beta: float = 0.0  # KL weight; 0 loads no reference model
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    scale_rewards: str = "group"  # group | batch | none
    mask_truncated_completions: bool = False
    bf16: str = "auto"  # auto (on for CUDA with bf16 support) | true | false
    optim: str = "adamw_torch"
    # DAPO's dynamic sampling within TRL's fixed batch: roll out ceil(oversample x groups) groups (the extra
    # ones on fresh task slots) and train on the step's number of groups, those with reward variance first
    dynamic_sampling: bool = False
    oversample: float = 2.0
    # Log `kl` to the model the LoRA starts from (adapter off) without adding it to the loss (beta = 0):
    # one extra no-grad forward per generation batch (two where TRL computes no old log-probs itself)
    log_kl: bool = False
    # TRL's correction for vLLM's sampling log-probs against the trainer's (vLLM rollouts only), per token
    # here: TRL's default ("sequence_mask", one ratio per sequence) sums ~1,000 tokens of bf16 noise in a
    # multi-turn completion (GPU proof run 3: mean sequence ratio 0.61, so a step's gradient shrank by ~40%)
    vllm_importance_sampling: str = "token_truncate"
    # Fewer padded tokens in the trainer's forwards (`fathom.train.padding`): micro-batches of similar
    # lengths instead of TRL's shuffled ones, each forward cut to its longest sequence. The step's gradient
    # is the same (the loss types below normalise by whole-batch counts); not with bnpo (per micro-batch)
    group_by_length: bool = False

    def __post_init__(self) -> None:
        _one_of(
            "grpo",
            "vllm_importance_sampling",
            self.vllm_importance_sampling,
            ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"),
        )
        _positive("grpo", self, "max_steps", "learning_rate", "per_device_train_batch_size")
        _positive("grpo", self, "gradient_accumulation_steps", "num_iterations")
        _positive("grpo", self, "warmup_steps", "weight_decay", "max_grad_norm", "beta", allow_zero=True)
        if self.num_generations < 2:
            raise ConfigError(
                f"grpo.num_generations must be >= 2 (a group needs a baseline); got {self.num_generations}"
            )
        per_rank = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if per_rank % self.num_generations:
            raise ConfigError(
                f"grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps ({per_rank}) must be a "
                f"multiple of grpo.num_generations ({self.num_generations}): each rank rolls out whole groups"
            )
        _one_of("grpo", "loss_type", self.loss_type, ("grpo", "dapo", "dr_grpo", "bnpo", "cispo", "sapo"))
        _one_of("grpo", "scale_rewards", self.scale_rewards, ("group", "batch", "none"))
        if self.group_by_length and self.loss_type == "bnpo":
            raise ConfigError(
                "grpo.group_by_length changes the step's gradient under loss_type = 'bnpo' (it normalises "
                "by each micro-batch's token count): use dapo, grpo, dr_grpo, cispo or sapo"
            )
        _one_of("grpo", "bf16", self.bf16, ("auto", "true", "false"))
        if not 1 <= self.oversample <= MAX_OVERSAMPLE:
            raise ConfigError(f"grpo.oversample must be in [1, {MAX_OVERSAMPLE}]; got {self.oversample}")
        if self.dynamic_sampling and self.oversample == 1:
            raise ConfigError("grpo.dynamic_sampling needs grpo.oversample > 1 (1 samples no extra group)")
        if self.log_kl and self.beta:
            raise ConfigError("grpo.log_kl is for beta = 0: with grpo.beta > 0 TRL already logs kl")


@dataclass(frozen=True)
class TierConfig:
    name: str
    lengths: tuple[int, ...] = (8192,)
    families: tuple[str, ...] = ()  # empty: every family
    difficulties: tuple[str, ...] = ("easy",)

    def __post_init__(self) -> None:
        from fathom.tasks import DIFFICULTIES, FAMILIES

        if not self.lengths or any(n <= 0 for n in self.lengths):
            raise ConfigError(
                f"tier {self.name!r}: lengths must be positive token counts; got {self.lengths}"
            )
        unknown = sorted(set(self.families) - set(FAMILIES))
        if unknown:
            raise ConfigError(f"tier {self.name!r}: unknown families {unknown}; known: {', '.join(FAMILIES)}")
        bad = sorted(set(self.difficulties) - set(DIFFICULTIES))
        if bad or not self.difficulties:
            raise ConfigError(
                f"tier {self.name!r}: difficulties must be from {DIFFICULTIES}; got {self.difficulties}"
            )


@dataclass(frozen=True)
class CurriculumConfig:
    tiers: tuple[TierConfig, ...] = (TierConfig("8k-easy"),)
    start_tier: int = 0
    metric: str = "reward"  # what the EMA tracks: reward (the environment's total) | accuracy
    ema_alpha: float = 0.1  # ema <- (1 - alpha) * ema + alpha * step mean
    advance_threshold: float = 0.6
    min_dwell_steps: int = 20  # steps in a tier before it may advance

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ConfigError("curriculum.tiers must list at least one tier")
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ConfigError(f"curriculum.tiers names must be unique; got {names}")
        if not 0 <= self.start_tier < len(self.tiers):
            raise ConfigError(
                f"curriculum.start_tier must be in 0..{len(self.tiers) - 1}; got {self.start_tier}"
            )
        _one_of("curriculum", "metric", self.metric, ("reward", "accuracy"))
        if not 0 < self.ema_alpha <= 1:
            raise ConfigError(f"curriculum.ema_alpha must be in (0, 1]; got {self.ema_alpha}")
        _positive("curriculum", self, "min_dwell_steps", allow_zero=True)


@dataclass(frozen=True)
class PenaltyConfig:
    """The adaptive (Lagrangian) weight on the token-budget penalty; replaces the reward's fixed token bonus."""

    enabled: bool = True
    init: float = 0.05
    lr: float = 0.05  # dual ascent step: weight += lr * (accuracy - accuracy_floor)
    accuracy_floor: float = 0.5
    min: float = 0.0
    max: float = 0.3
    rank_bonus: float = 0.0  # zero-mean bonus by length among a group's correct rollouts; 0: off

    def __post_init__(self) -> None:
        _positive("penalty", self, "init", "lr", "min", "max", "rank_bonus", allow_zero=True)
        if not self.min <= self.init <= self.max:
            raise ConfigError(
                f"need penalty.min <= penalty.init <= penalty.max; got {self.min}, {self.init}, {self.max}"
            )
        if not 0 <= self.accuracy_floor <= 1:
            raise ConfigError(f"penalty.accuracy_floor must be in [0, 1]; got {self.accuracy_floor}")


@dataclass(frozen=True)
class EvalConfig:
    every: int = 0  # steps between evals on the fixed eval set; 0: off
    num_tasks: int = 16
    tier: int = -1  # curriculum tier the eval set is drawn from (-1: the last)
    temperature: float = 0.0
    seed: int = 1234

    def __post_init__(self) -> None:
        _positive("eval", self, "every", "temperature", allow_zero=True)
        _positive("eval", self, "num_tasks")


@dataclass(frozen=True)
class CheckpointConfig:
    save_every: int = 0  # also save every N steps; 0: only the geometric schedule and the last step
    geometric: bool = True  # save at steps first, first*factor, first*factor^2, ...
    geometric_first: int = 1
    geometric_factor: float = 2.0
    keep_last: int = 3  # pruning keeps the first checkpoint and the newest keep_last
    export_merged: bool = True  # after the adapter, also write a merged 16-bit model
    export_dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        _positive("checkpoint", self, "save_every", allow_zero=True)
        _positive("checkpoint", self, "geometric_first", "keep_last")
        if self.geometric_factor <= 1:
            raise ConfigError(f"checkpoint.geometric_factor must be > 1; got {self.geometric_factor}")
        _one_of("checkpoint", "export_dtype", self.export_dtype, ("bfloat16", "float16"))


@dataclass(frozen=True)
class LoggingConfig:
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "fathom"
    wandb_mode: str = "offline"  # offline never touches the network; `wandb sync` uploads later
    traces: bool = True  # every rollout, untruncated, to traces.jsonl
    progress: bool = True

    def __post_init__(self) -> None:
        _one_of("logging", "wandb_mode", self.wandb_mode, ("offline", "online", "disabled"))


@dataclass(frozen=True)
class SFTConfig:
    # teacher (scripted, knows only the conversation; ungrounded transcripts dropped) | expert (scripted, knows
    # the task formats) | openai (a teacher endpoint) | file
    source: str = "teacher"
    transcripts: str = ""  # source = file: a transcripts.jsonl written by an earlier `fathom sft`
    teacher_url: str = ""
    teacher_model: str = ""
    teacher_api_key_env: str = "OPENAI_API_KEY"
    teacher_temperature: float = 0.0
    teacher_concurrency: int = 8
    num_tasks: int = 64
    tier: int = 0  # curriculum tier the SFT tasks are drawn from
    max_turns: int = 8  # the expert needs 2-4; a teacher may take more
    seed: int = 7
    epochs: float = 2.0
    learning_rate: float = 2e-4
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 1
    max_length: int = 8192
    # Reader-role rows (an llm() prompt with its chunk -> the scripted reader's answer) mixed in: this many
    # per trained transcript (0 = none). Only the scripted sources (teacher, expert) record reader calls.
    reader_ratio: float = 0.5
    # Which rows share an optimizer step (`fathom.train.sft_batches`): mixed (any), or own (reader rows in
    # steps of their own, so their few loss tokens are not averaged into the transcripts' thousands)
    reader_batches: str = "mixed"
    # What SFT trains: all (the transcripts and the reader rows: one model plays both roles), or reader (the
    # reader rows alone: an adapter that only answers llm() calls, evaluated as a separate reader model)
    rows: str = "all"
    # Where the recorded reader calls are read from (default RUN/reader_calls.jsonl, which SFT's collection
    # writes): a reader-only run points it at the collecting run's file
    reader_calls: str = ""
    # Error-recovery demonstrations (source teacher): this share of the reader's not-found replies is an echo
    # of a name the question asks about, which the teacher's answer check catches; echoes are never reader rows.
    reader_echo: float = 0.0
    # Error-recovery demonstrations (source teacher): this share of the teacher's cells is first written faulty
    # (a misnamed variable, a cell cut short), then repaired after the traceback; the faulty turns get loss 0.
    teacher_slips: float = 0.0
    # When to stop (`fathom.train.sft_stopping`): this fraction of the trained transcripts (whole tasks) is held
    # out and scored every `eval_every` optimizer steps (0 = once an epoch); the weights of the best held-out
    # loss are kept, and training stops after `patience` evaluations without improvement or when the
    # held-out policy entropy falls under `entropy_floor` nats a token, but not before `min_epochs` epochs
    # (evaluations under the floor are still never kept). holdout = 0: train every epoch.
    holdout: float = 0.0
    eval_every: int = 0
    patience: int = 2
    entropy_floor: float = 0.0
    min_epochs: float = 0.0

    def __post_init__(self) -> None:
        _one_of("sft", "source", self.source, ("teacher", "expert", "openai", "file"))
        _one_of("sft", "reader_batches", self.reader_batches, ("mixed", "own"))
        _one_of("sft", "rows", self.rows, ("all", "reader"))
        if self.rows == "reader" and (self.holdout > 0 or self.reader_ratio == 0):
            raise ConfigError(
                "sft.rows = reader trains reader rows only: it needs sft.reader_ratio > 0 and sft.holdout = 0 "
                f"(held-out rows are transcripts); got reader_ratio {self.reader_ratio}, holdout {self.holdout}"
            )
        if self.reader_calls and self.source != "file":
            raise ConfigError(
                "sft.reader_calls names an earlier run's recorded calls, so it goes with sft.source = file "
                f"(a collecting run records its own); got source {self.source!r}"
            )
        if self.reader_ratio < 0:
            raise ConfigError(f"sft.reader_ratio must be >= 0, got {self.reader_ratio}")
        if not 0 <= self.reader_echo <= 1:
            raise ConfigError(f"sft.reader_echo must be in [0, 1], got {self.reader_echo}")
        if not 0 <= self.teacher_slips <= 1:
            raise ConfigError(f"sft.teacher_slips must be in [0, 1], got {self.teacher_slips}")
        if not 0 <= self.holdout < 1:
            raise ConfigError(f"sft.holdout must be in [0, 1), got {self.holdout}")
        if self.patience < 1:
            raise ConfigError(f"sft.patience must be >= 1, got {self.patience}")
        _positive("sft", self, "eval_every", "entropy_floor", "min_epochs", allow_zero=True)
        if self.min_epochs > self.epochs:
            raise ConfigError(
                f"sft.min_epochs ({self.min_epochs}) must not exceed sft.epochs ({self.epochs})"
            )
        if self.source == "openai" and not (self.teacher_url and self.teacher_model):
            raise ConfigError("sft.source = 'openai' needs sft.teacher_url and sft.teacher_model")
        if self.source == "file" and not self.transcripts:
            raise ConfigError("sft.source = 'file' needs sft.transcripts")
        _positive(
            "sft",
            self,
            "num_tasks",
            "epochs",
            "learning_rate",
            "max_length",
            "teacher_concurrency",
            "max_turns",
        )


@dataclass(frozen=True)
class TrainConfig:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutSection = field(default_factory=RolloutSection)
    reward: RewardConfig = field(default_factory=RewardConfig)
    grpo: GRPOSection = field(default_factory=GRPOSection)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    penalty: PenaltyConfig = field(default_factory=PenaltyConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)

    def __post_init__(self) -> None:
        if self.rollout.sub_lm == "base" and not self.model.lora:
            raise ConfigError(
                "rollout.sub_lm = 'base' (adapters off for llm()) needs a LoRA policy: model.lora = true"
            )
        if self.rollout.train_subcalls and self.grpo.beta != 0:
            raise ConfigError(
                "rollout.train_subcalls with grpo.beta != 0 is not supported: the sub-call rows would need "
                "reference log-probs of their own"
            )
        # A correct answer carrying the largest penalty must still beat any wrong one.
        least_correct = (
            self.reward.format_weight + self.reward.correctness_weight * self.reward.correct_threshold
        )
        room = least_correct - self.reward.wrong_cap
        if self.penalty.enabled and self.penalty.max + self.penalty.rank_bonus >= room:
            raise ConfigError(
                f"penalty.max + penalty.rank_bonus ({self.penalty.max + self.penalty.rank_bonus}) must stay below "
                f"{room:.3f} (the least a correct answer earns minus reward.wrong_cap), or a correct but long "
                "answer could score below a wrong one"
            )
        if not -len(self.curriculum.tiers) <= self.eval.tier < len(self.curriculum.tiers):
            raise ConfigError(f"eval.tier {self.eval.tier} is not a curriculum tier index")
        if not -len(self.curriculum.tiers) <= self.sft.tier < len(self.curriculum.tiers):
            raise ConfigError(f"sft.tier {self.sft.tier} is not a curriculum tier index")
