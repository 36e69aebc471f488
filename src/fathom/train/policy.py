"""The policy to train, from the ``[model]`` section: a fresh LoRA, a full model, or an SFT result to continue.

``model.init_from`` accepts what `fathom sft` writes: ``RUN/final/adapter`` (a LoRA adapter over
``model.name``, loaded trainable so GRPO continues it) or ``RUN/final/merged`` / ``RUN/final/model`` (a full
model directory, which then gets a fresh adapter if ``model.lora``). `merge_base` names the weights an
adapter must be merged into at export. This module only loads; it does not train.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fathom.models import LoraSpec, ModelSpec, load_model
from fathom.train.config import ConfigError, ModelConfig


def device_for(setting: str) -> str:
    import torch

    if setting == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ConfigError("run.device = 'cuda' but no CUDA device is visible")
    return setting


def process_state(setting: str, gpu_memory_fraction: float = 0.0) -> tuple[str, Any]:
    """(device, accelerate ``PartialState``) for this process, before the trainer exists.

    Under ``accelerate launch`` (torchrun) on a machine without CUDA, a plain ``PartialState()`` would see no
    distributed backend and call every process the main one of a world of one; the trainer (``use_cpu``)
    then joins a gloo group of N. Passing ``cpu`` makes this early state agree with the trainer's, so the
    slot count, the main-process writes and the trace file names are right on CPUs as on GPUs. Under a
    launcher, this process is also made to die with it (`fathom.train.launcher`). A non-zero
    `gpu_memory_fraction` (``run.gpu_memory_fraction``) caps this process's share of its GPU.
    """
    import torch
    from accelerate import PartialState

    from fathom.train.launcher import die_with_launcher

    die_with_launcher()  # under accelerate launch / torchrun: a killed launcher takes this rank with it
    device = device_for(setting)
    state = PartialState(cpu=device == "cpu")
    if gpu_memory_fraction and device == "cuda":
        torch.cuda.set_per_process_memory_fraction(gpu_memory_fraction, torch.cuda.current_device())
    return device, state


def use_bf16(setting: str, device: str) -> bool:
    """``grpo.bf16``: auto means bf16 autocast on a CUDA device that supports it."""
    import torch

    if setting == "auto":
        return device == "cuda" and torch.cuda.is_bf16_supported()
    return setting == "true"


def _lora(config: ModelConfig) -> LoraSpec:
    targets = config.lora_targets
    return LoraSpec(
        r=config.lora_r,
        alpha=config.lora_alpha,
        dropout=config.lora_dropout,
        target_modules=targets[0] if targets == ("all-linear",) else targets,
    )


def merge_base(config: ModelConfig) -> str:
    """The full weights the trained adapter applies to."""
    init = Path(config.init_from) if config.init_from else None
    if init is not None and (init / "config.json").exists() and not (init / "adapter_config.json").exists():
        return str(init)
    return config.name


def load_policy(config: ModelConfig, device: str) -> tuple[Any, Any]:
    """(model, tokenizer) ready for GRPO or SFT, on `device` (4-bit models are placed by bitsandbytes)."""
    init = Path(config.init_from) if config.init_from else None
    if init is not None and not init.exists():
        raise ConfigError(f"model.init_from {init} does not exist")
    is_adapter = init is not None and (init / "adapter_config.json").exists()
    if init is not None and not is_adapter and not (init / "config.json").exists():
        raise ConfigError(f"model.init_from {init} is neither a LoRA adapter nor a model directory")
    name = str(init) if init is not None and not is_adapter else config.name
    fresh_lora = config.lora and not is_adapter and not config.load_in_4bit
    spec = ModelSpec(
        name=name,
        dtype=config.dtype,
        lora=_lora(config) if fresh_lora else None,
        load_in_4bit=config.load_in_4bit,
        chat=config.chat,
        device=device,
    )
    model, tokenizer = load_model(spec)
    if config.load_in_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=config.gradient_checkpointing
        )
    if is_adapter:
        from peft import PeftModel

        if not config.lora:
            raise ConfigError(f"model.init_from {init} is a LoRA adapter: it needs model.lora = true")
        model = PeftModel.from_pretrained(model, init, is_trainable=True)
    elif config.load_in_4bit:
        from peft import LoraConfig, get_peft_model

        lora = _lora(config)
        target = lora.target_modules
        model = get_peft_model(
            model,
            LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=target if isinstance(target, str) else list(target),
                task_type="CAUSAL_LM",
            ),
        )
    return model, tokenizer  # gradient checkpointing is switched on by the trainer (TrainingArguments)
