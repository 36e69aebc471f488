"""Policy models: loading by name or path, offline real and tiny models, LoRA and 4-bit options."""

from fathom.models.loading import (
    LoraSpec,
    ModelLoadError,
    ModelSpec,
    load_model,
    load_tokenizer,
    resolve_model_dir,
)
from fathom.models.offline import (
    OfflineModelError,
    qwen_coder_dir,
    qwen_tokenizer_dir,
    smollm2_dir,
    tiny_model_dir,
)

__all__ = [
    "LoraSpec",
    "ModelLoadError",
    "ModelSpec",
    "OfflineModelError",
    "load_model",
    "load_tokenizer",
    "qwen_coder_dir",
    "qwen_tokenizer_dir",
    "resolve_model_dir",
    "smollm2_dir",
    "tiny_model_dir",
]
