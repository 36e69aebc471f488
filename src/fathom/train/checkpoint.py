"""Checkpoints: when to save, atomic directories, pruning, finding the one to resume, and the final export.

- Schedule: a geometric series (``first, first*factor, ...`` rounded, so early progress is kept densely and
  late progress sparsely) plus every ``save_every`` steps plus the last step.
- Atomic: a checkpoint is written under ``RUN/.tmp-checkpoint-N`` and renamed to ``RUN/checkpoint-N`` only
  when complete (files and directory fsynced), so a SIGKILL never leaves a half checkpoint that a resume
  would trust. Stale temp dirs are removed at start.
- Pruning keeps the first checkpoint (the earliest behaviour on record) and the newest ``keep_last``.
- Export: the adapter alone first (small, always loadable), then a merged 16-bit model; a 4-bit base is
  reloaded in 16-bit before merging, never merged in 4-bit (rounding into 4-bit weights changes the model).

What a checkpoint holds is written by `fathom.train.grpo.FathomGRPOTrainer._save_checkpoint`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from fathom.train.config import CheckpointConfig

PREFIX = "checkpoint-"
TMP_PREFIX = ".tmp-"
STATE_FILE = "fathom_state.json"
_CKPT_RE = re.compile(rf"^{PREFIX}(\d+)$")


def geometric_steps(first: int, factor: float, until: int) -> set[int]:
    steps, value = set(), float(first)
    while round(value) <= until:
        steps.add(round(value))
        value *= factor
    return steps


def should_save(step: int, max_steps: int, config: CheckpointConfig) -> bool:
    if step >= max_steps:
        return True
    if config.save_every and step % config.save_every == 0:
        return True
    return config.geometric and step in geometric_steps(config.geometric_first, config.geometric_factor, step)


def checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints in the run dir, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if p.is_dir() and (m := _CKPT_RE.match(p.name))]
    return sorted(found)


def latest(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1][1] if found else None


def prune(run_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete all but the first and the newest `keep_last` checkpoints; returns what was deleted."""
    found = checkpoints(run_dir)
    keep = {found[0][1], *(p for _, p in found[-keep_last:])} if found else set()
    removed = [p for _, p in found if p not in keep]
    for path in removed:
        shutil.rmtree(path)
    return removed


def clean_stale(run_dir: str | Path) -> None:
    """Remove temp dirs a killed save left behind."""
    run_dir = Path(run_dir)
    if run_dir.is_dir():
        for p in run_dir.iterdir():
            if p.name.startswith(TMP_PREFIX) and p.is_dir():
                shutil.rmtree(p)


def staging_dir(final: Path) -> Path:
    return final.parent / f"{TMP_PREFIX}{final.name}"


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(staging: Path, final: Path) -> None:
    """Make a fully written staging dir the checkpoint `final`, atomically."""
    _fsync_tree(staging)
    if final.exists():  # a re-save of the same step (resume at a step that was saved)
        shutil.rmtree(final)
    os.replace(staging, final)
    _fsync_dir(final.parent)


def write_state(directory: Path, state: dict[str, Any]) -> None:
    (directory / STATE_FILE).write_text(json.dumps(state, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_state(checkpoint: str | Path) -> dict[str, Any]:
    path = Path(checkpoint) / STATE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{checkpoint} has no {STATE_FILE}: not a FATHOM GRPO checkpoint")
    return json.loads(path.read_text(encoding="utf-8"))


def atomic_save(final: Path, save: Any) -> Path:
    staging = staging_dir(final)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    save(staging)
    commit(staging, final)
    return final


def export(
    model: Any,
    tokenizer: Any,
    out_dir: str | Path,
    base_name: str,
    config: CheckpointConfig,
    state_dict: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Adapter first (LoRA), then a merged 16-bit model; a full fine-tune is saved in 16-bit directly.

    `state_dict`: the model's full (unsharded) state, for a model whose parameters are shards (FSDP): it is
    gathered by every rank together (``accelerator.get_state_dict``) and written from it here."""
    import torch

    out_dir = Path(out_dir)
    dtype = getattr(torch, config.export_dtype)
    written: dict[str, str] = {}
    if hasattr(model, "peft_config"):

        def save_adapter(d: Path) -> None:
            if state_dict is None:
                model.save_pretrained(d)
            else:  # PEFT keeps the adapter's keys of a full state dict
                model.save_pretrained(d, state_dict=state_dict)
            tokenizer.save_pretrained(d)

        adapter = atomic_save(out_dir / "adapter", save_adapter)
        written["adapter"] = str(adapter)
        if config.export_merged:
            written["merged"] = str(
                atomic_save(
                    out_dir / "merged", lambda d: merge_adapter(adapter, base_name, dtype, tokenizer, d)
                )
            )
    else:

        def save_full(d: Path) -> None:
            if state_dict is not None:
                cast = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()}
                model.save_pretrained(d, state_dict=cast)
                tokenizer.save_pretrained(d)
                return
            original = next(model.parameters()).dtype
            model.to(dtype)
            try:
                model.save_pretrained(d)
            finally:
                model.to(original)
            tokenizer.save_pretrained(d)

        written["model"] = str(atomic_save(out_dir / "model", save_full))
    return written


def merge_adapter(adapter: Path, base_name: str, dtype: Any, tokenizer: Any, out: Path) -> None:
    """Reload the base in 16-bit on the CPU (never the 4-bit training copy), apply the adapter, merge, save.

    Refuses a dtype other than bfloat16/float16 and a base stored quantized (its config carries a
    ``quantization_config``, which would load it in 4-bit whatever dtype is asked for)."""
    import torch
    from peft import PeftModel
    from transformers import AutoConfig, AutoModelForCausalLM

    from fathom.models import resolve_model_dir

    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"merged weights are 16-bit (bfloat16 or float16); got {dtype}")
    source = resolve_model_dir(base_name)
    quantization = getattr(AutoConfig.from_pretrained(source), "quantization_config", None)
    if quantization:
        method = quantization.get("quant_method", "?") if isinstance(quantization, dict) else quantization
        raise ValueError(
            f"base model {base_name} is stored quantized ({method}): merging into it would round the merged "
            "weights; merge over its unquantized 16-bit weights instead"
        )
    base = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
    merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
    merged.save_pretrained(out)
    tokenizer.save_pretrained(out)
