"""Skip an optimizer step whose gradient is not finite, and say so.

One NaN or inf gradient, once applied, makes every weight NaN: in GPU proof run 4 (Qwen2.5-Coder-0.5B, full
fine-tune, bf16 autocast) one SFT step's gradient norm came back NaN while its logged loss was finite (HF's
Trainer drops non-finite losses from its logs), and every later step trained a NaN model. A mixed-precision
GradScaler skips such steps for fp16; nothing does for bf16. `SkipNonFiniteSteps` does: just before the
optimizer step (after clipping) it checks the gradients, and when any is NaN or inf it sets every gradient
to None, so that the optimizer leaves those weights and their moments untouched. Each skip is recorded by
optimizer step; `fathom sft` writes them to its summary and GRPO logs the count.

It does not find the batch's cause; the record says when it happened.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback


def grads_finite(parameters: Any) -> bool:
    """Every present gradient is finite."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return True
    norms = torch._foreach_norm(grads)  # one fused pass; a NaN or inf anywhere makes its tensor's norm so
    return bool(torch.isfinite(torch.stack([n.float() for n in norms])).all())


class SkipNonFiniteSteps(TrainerCallback):
    """Drops the gradients of an optimizer step that are not all finite; `skipped` lists those steps."""

    def __init__(self) -> None:
        self.skipped: list[int] = []

    def on_pre_optimizer_step(
        self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any
    ) -> None:
        if model is None:
            raise RuntimeError("SkipNonFiniteSteps needs the model (transformers passes it to callbacks)")
        params = list(model.parameters())
        if grads_finite(params):
            return
        for p in params:
            p.grad = None
        self.skipped.append(state.global_step + 1)  # the step this update would have been
