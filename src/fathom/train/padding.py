"""Fewer padded tokens in GRPO's trainer forwards (``grpo.group_by_length``), the same gradient.

TRL pads a generation batch to its widest prompt (left) and widest completion (right), shuffles the rows and
cuts them into ``steps_per_generation`` micro-batches, so every forward is as wide as the batch's longest
multi-turn episode; its no-grad forward for old log-probs (vLLM's importance-sampling correction) runs the
same width in chunks of rollout order. Here instead:

- `length_grouped`: the micro-batches hold rows of similar completion length (longest first), in place of
  TRL's shuffle. One optimizer step still sees the whole generation batch (steps per generation = gradient
  accumulation), and the loss types that normalise by whole-batch counts (dapo, cispo: tokens of the batch;
  grpo, sapo: sequences, equal per micro-batch; dr_grpo: a constant) give the step the same gradient
  whichever rows share a micro-batch. bnpo normalises per micro-batch, so the config refuses it.
- `trimmed_logps`: each forward chunk is cut after its last attended column (rows sorted by length first
  when the call is chunked) and its outputs padded back with zeros, which is what TRL's fused LM head
  returns at unattended positions. Causal attention makes a row's log-probs independent of columns after
  it, so only float noise from other kernel shapes differs (the CPU test bounds it).

Not done: left (prompt) padding is kept, since cutting it would shift the positions the trainer scores
(prompts here differ by tens of tokens); true packing (one row, several sequences) needs a varlen attention
kernel; multimodal batches go through TRL unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

Forward = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor | None, Any]]


def attended_ends(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B,) one past each row's last attended column; 0 for a row with none."""
    columns = torch.arange(1, attention_mask.size(1) + 1, device=attention_mask.device)
    return (attention_mask.bool() * columns).amax(dim=1)


def completion_lengths(batch: dict[str, Any]) -> torch.Tensor:
    return attended_ends(batch["completion_mask"])


def permuted(batch: dict[str, Any], order: torch.Tensor) -> dict[str, Any]:
    """Every per-row value of `batch` in `order` (as TRL's ``shuffle_sequence_dict`` permutes them)."""

    def permute(value: Any) -> Any:
        if value is None or (isinstance(value, torch.Tensor) and value.ndim == 0):
            return value
        if isinstance(value, torch.Tensor):
            return value[order.to(value.device)]
        return [value[i] for i in order.tolist()]

    return {key: permute(value) for key, value in batch.items()}


def length_grouped(batch: dict[str, Any], num_chunks: int) -> list[dict[str, Any]]:
    """`batch` cut into `num_chunks` equal micro-batches of similar completion lengths, longest first."""
    from trl.trainer.utils import split_tensor_dict

    rows = batch["completion_mask"].size(0)
    if rows % num_chunks:  # TRL's split would drop the remainder silently
        raise ValueError(f"{rows} rows do not split into {num_chunks} equal micro-batches")
    order = torch.argsort(completion_lengths(batch).cpu(), descending=True, stable=True)
    return split_tensor_dict(permuted(batch, order), num_chunks)


def trimmed_logps(
    forward: Forward,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    batch_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs and entropies (B, logits_to_keep) as TRL computes them, each chunk of
    `batch_size` rows cut to its longest row. `forward(ids, mask, keep)` is TRL's own computation on one
    chunk (its ``_get_per_token_logps_and_entropies``)."""
    rows, width = input_ids.shape
    size = batch_size or rows
    ends = attended_ends(attention_mask)
    # Chunked (the no-grad old-log-prob pass): rows of similar length share a chunk.
    order = torch.argsort(ends, descending=True, stable=True) if size < rows else None
    prompt_width = width - logits_to_keep
    logps, entropies = [], []
    for start in range(0, rows, size):
        index = slice(start, start + size) if order is None else order[start : start + size]
        # At least one completion column, so that TRL scores a non-empty completion slice.
        cut = max(int(ends[index].max()), prompt_width + 1)
        keep = cut - prompt_width
        lp, entropy, _ = forward(input_ids[index, :cut], attention_mask[index, :cut], keep)
        logps.append(F.pad(lp, (0, logits_to_keep - keep)))
        if entropy is not None:
            entropies.append(F.pad(entropy, (0, logits_to_keep - keep)))
    logp = torch.cat(logps)
    entropy = torch.cat(entropies) if entropies else None
    if order is not None:
        inverse = torch.argsort(order)
        logp = logp[inverse]
        entropy = None if entropy is None else entropy[inverse]
    return logp, entropy
