"""Load a policy model and its tokenizer: any HF causal LM by hub name or local path, or an offline one.

`load_model(ModelSpec(...))` resolves the name (``smollm2-135m``, ``qwen2.5-coder-0.5b``,
``qwen2.5-coder-1.5b``, ``tiny-qwen``, ``tiny-smol`` are built offline by `fathom.models.offline`; anything
else is a local directory or a hub id), loads it in the requested dtype, optionally in 4-bit (bitsandbytes)
and optionally wrapped in a LoRA adapter (PEFT).
Errors say what to do: a missing path, a hub id on an offline machine, a missing chat template for a
chat-format policy.

This module does not generate text; see `fathom.rollout`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.models.offline import (
    QWEN_CODER_CHECKPOINTS,
    TINY_KINDS,
    qwen_coder_dir,
    smollm2_dir,
    tiny_model_dir,
)

QWEN_CODER_NAMES = {c.name: size for size, c in QWEN_CODER_CHECKPOINTS.items()}
OFFLINE_NAMES = ("smollm2-135m", *QWEN_CODER_NAMES, *TINY_KINDS)
DTYPES = ("float32", "bfloat16", "float16")


class ModelLoadError(RuntimeError):
    """The model asked for cannot be loaded here; the message says why and what to pass instead."""


@dataclass(frozen=True)
class LoraSpec:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"


@dataclass(frozen=True)
class ModelSpec:
    name: str = "tiny-smol"
    dtype: str = "float32"
    lora: LoraSpec | None = None
    load_in_4bit: bool = False
    chat: bool = True  # False: a base model driven through a few-shot prefix (fathom.rollout.chat)
    device: str | None = None  # None: cuda if available, else cpu

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")


def resolve_model_dir(name: str) -> Path | str:
    """A local directory for offline names and paths; the hub id itself otherwise."""
    if name == "smollm2-135m":
        return smollm2_dir()
    if name in QWEN_CODER_NAMES:
        return qwen_coder_dir(QWEN_CODER_NAMES[name])
    if name in TINY_KINDS:
        return tiny_model_dir(name)
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"{path} exists but holds no config.json: not a transformers model directory"
            )
        return path
    if name.startswith((".", "/", "~")) or name.count("/") != 1:
        raise ModelLoadError(
            f"model path {name!r} does not exist (offline models: {', '.join(OFFLINE_NAMES)})"
        )
    return name  # a hub id such as Qwen/Qwen2.5-Coder-1.5B-Instruct


def _from_pretrained(cls: Any, source: Path | str, **kwargs: Any) -> Any:
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    if isinstance(source, str) and offline:
        # huggingface_hub reads HF_HUB_OFFLINE once, at import: set later (by a caller, a notebook), it would
        # still retry the network for ~45 s before failing. The local cache is all an offline run may use.
        kwargs.setdefault("local_files_only", True)
    try:
        return cls.from_pretrained(source, **kwargs)
    except OSError as exc:
        if isinstance(source, str):
            why = "HF_HUB_OFFLINE is set" if offline else "the hub could not be reached or has no such model"
            raise ModelLoadError(
                f"cannot load {source!r}: it is not a local directory, not in the local HF cache, and {why}. "
                f"Pass a local directory or one of {', '.join(OFFLINE_NAMES)}. ({exc})"
            ) from exc
        raise ModelLoadError(f"cannot load {source}: {exc}") from exc


def load_tokenizer(spec: ModelSpec) -> Any:
    from transformers import AutoTokenizer

    tokenizer = _from_pretrained(AutoTokenizer, resolve_model_dir(spec.name))
    if spec.chat and not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(
            f"{spec.name} has no chat template: load it with chat=False to drive it as a base model "
            "through the few-shot prefix"
        )
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(spec: ModelSpec) -> tuple[Any, Any]:
    """(model, tokenizer) ready for generation and training."""
    import torch
    from transformers import AutoModelForCausalLM

    source = resolve_model_dir(spec.name)
    tokenizer = load_tokenizer(spec)
    kwargs: dict[str, Any] = {"dtype": getattr(torch, spec.dtype)}
    if spec.load_in_4bit:
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as exc:
            raise ModelLoadError(
                "load_in_4bit needs bitsandbytes (and a CUDA GPU): pip install bitsandbytes"
            ) from exc
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_compute_dtype=getattr(torch, spec.dtype), bnb_4bit_quant_type="nf4"
        )
    model = _from_pretrained(AutoModelForCausalLM, source, **kwargs)
    device = spec.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if not spec.load_in_4bit:
        model.to(device)
    if spec.lora is not None:
        from peft import LoraConfig, get_peft_model

        target = spec.lora.target_modules
        model = get_peft_model(
            model,
            LoraConfig(
                r=spec.lora.r,
                lora_alpha=spec.lora.alpha,
                lora_dropout=spec.lora.dropout,
                target_modules=target if isinstance(target, str) else list(target),
                task_type="CAUSAL_LM",
            ),
        )
    return model, tokenizer
