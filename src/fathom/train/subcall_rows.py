"""The policy's own `llm()` answers as extra GRPO rows (``rollout.train_subcalls``).

An episode's sub-call generation (`fathom.rollout.episode.SubCall`: its prompt ids, the ids the policy sampled,
their log-probs) is its own sequence with its own prompt, so it cannot ride in the episode's row. It becomes a
row of its own that carries its episode's group-relative advantage: every generation of an episode is credited
with the episode's outcome, as agentic RL trains sub-agents.

Where the rows go in: after TRL's ``_generate_and_score_completions`` has built and scored the episode rows
(`add_subcall_rows`, called by `FathomGRPOTrainer`). There the advantages exist, and TRL has already written each
``rollout_func`` extra field onto its input row, so ``inputs[i]["fathom_subcalls"]`` are episode ``i``'s
sub-calls and ``advantages[i]`` its advantage. Sub-call rows cannot come back from ``rollout_func`` itself: TRL
groups its rows by ``num_generations`` to compute advantages and needs one row per prompt.

What the rows look like: the batch is widened to the widest prompt (left-padded, as TRL pads) and the widest
completion (right-padded); a sub-call row's completion mask (and tool mask) is one over its generated ids, zero
after; its sampling log-probs are the engine's; ``old_per_token_logps`` (present when TRL needs them: several
optimisation passes, or vLLM's importance-sampling correction) are computed for the new rows with the trainer's
model exactly as TRL computes them for the others, and so is the vLLM importance-sampling ratio;
``num_items_in_batch`` (the token count DAPO / CISPO normalise by) counts the new tokens on every rank.

Bounds: TRL later shuffles the rows and cuts them into ``steps_per_generation`` equal chunks (a remainder would
be dropped silently), and each chunk is one forward pass. So the sub-call rows are capped
(``rollout.max_subcall_rows`` per rank and generation batch, default as many as the episode rows: a micro-batch
is then at most twice ``per_device_train_batch_size`` rows, each as wide as the widest prompt plus the widest
completion), whole sub-calls over the cap are dropped round-robin (every episode's first sub-call before any
second one), and zero-weight padding rows (one pad token, nothing trained) make the count a multiple of
``steps_per_generation`` and equal on every rank (so every rank makes the same number of forward calls, as
FSDP needs). Not done: reference log-probs (``grpo.beta`` must be 0), multimodal batches, the turns of child
episodes below ``rollout.max_depth`` (only the leaf ``llm()`` answers are recorded as sub-calls).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fathom.rollout.episode import SubCall

# Keys of TRL's batch whose second axis is the completion axis (padded on the right)
COMPLETION_KEYS = ("completion_ids", "completion_mask", "tool_mask", "old_per_token_logps",
                   "sampling_per_token_logps", "importance_sampling_ratio", "ref_per_token_logps")  # fmt: skip
ROW_KEYS = ("prompt_ids", "prompt_mask", "advantages", *COMPLETION_KEYS)
SCALAR_KEYS = ("num_items_in_batch",)


@dataclass(frozen=True)
class SubcallRow:
    """One trainable sub-call: the episode row it belongs to, and its tokens."""

    episode: int  # index of its episode's row in the batch
    prompt_ids: list[int]
    ids: list[int]
    logprobs: list[float] | None
    trained: bool = True  # False: attended but masked (a truncated answer under mask_truncated_completions)


def trainable(subcalls: Sequence[SubCall]) -> list[SubCall]:
    """The sub-calls the policy answered with its adapter on and that produced tokens."""
    return [s for s in subcalls if s.adapter and s.ids]


def select(per_episode: Sequence[Sequence[SubCall]], cap: int) -> tuple[list[tuple[int, SubCall]], int]:
    """At most ``cap`` (episode index, sub-call) pairs, round-robin over episodes; returns them and the count
    dropped. Deterministic: the k-th sub-call of every episode comes before any episode's (k+1)-th."""
    if cap < 0:
        raise ValueError(f"cap must be >= 0, got {cap}")
    depth = max((len(s) for s in per_episode), default=0)
    order = [(e, calls[k]) for k in range(depth) for e, calls in enumerate(per_episode) if k < len(calls)]
    # back in episode order, each episode's calls in their own order
    kept = sorted(order[:cap], key=lambda pair: pair[0])
    return kept, len(order) - len(kept)


def padded_count(rows: int, multiple: int) -> int:
    """The least multiple of ``multiple`` that holds ``rows`` rows."""
    return math.ceil(rows / multiple) * multiple


def _widen(t: torch.Tensor, width: int, value: float, left: bool) -> torch.Tensor:
    extra = width - t.size(1)
    if extra < 0:
        raise ValueError(f"cannot narrow a batch tensor from {t.size(1)} to {width}")
    if extra == 0:
        return t
    pad = t.new_full((t.size(0), extra), value)
    return torch.cat([pad, t] if left else [t, pad], dim=1)


def extend_batch(
    batch: dict[str, Any],
    rows: Sequence[SubcallRow],
    total_rows: int,
    pad_id: int,
    pad_to_multiple_of: int | None = None,
) -> dict[str, Any]:
    """TRL's generation batch with ``rows`` appended and padding rows up to ``total_rows`` new rows.

    Every row-indexed tensor is widened (prompts on the left, completions on the right) and extended; the new
    rows' ``old_per_token_logps`` and ``importance_sampling_ratio`` are placeholders (0 and 1) for the caller
    to fill from the model; ``num_items_in_batch`` is left for the caller (it is a sum over ranks)."""
    unknown = [k for k, v in batch.items() if k not in ROW_KEYS + SCALAR_KEYS and v is not None]
    if unknown:
        raise ValueError(
            f"sub-call rows cannot extend a batch with {unknown} (multimodal batches unsupported)"
        )
    if len(rows) > total_rows:
        raise ValueError(f"{len(rows)} sub-call rows do not fit in {total_rows}")
    if batch.get("ref_per_token_logps") is not None:
        raise ValueError("sub-call rows carry no reference log-probs: train them with grpo.beta = 0")
    sampling = batch.get("sampling_per_token_logps")
    if sampling is not None and any(r.logprobs is None for r in rows):
        raise ValueError("the batch has sampling log-probs but a sub-call was generated without them")
    for r in rows:
        if r.logprobs is not None and len(r.logprobs) != len(r.ids):
            raise ValueError(f"a sub-call has {len(r.ids)} ids but {len(r.logprobs)} log-probs")
    n_main = batch["prompt_ids"].size(0)
    n_pad = total_rows - len(rows)
    if any(not 0 <= r.episode < n_main for r in rows):
        raise ValueError(f"a sub-call row points outside the {n_main} episode rows")

    prompts = [r.prompt_ids for r in rows] + [[pad_id]] * n_pad
    completions = [r.ids for r in rows] + [[pad_id]] * n_pad
    p_width = max(batch["prompt_ids"].size(1), *(len(p) for p in prompts))
    c_width = max(batch["completion_ids"].size(1), *(len(c) for c in completions))
    if pad_to_multiple_of:
        p_width, c_width = (
            padded_count(p_width, pad_to_multiple_of),
            padded_count(c_width, pad_to_multiple_of),
        )

    def new(width: int, fill: float, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
        return torch.full((total_rows, width), fill, dtype=dtype, device=like.device)

    ref = batch["completion_ids"]
    add_prompt_ids = new(p_width, pad_id, ref.dtype, ref)
    add_prompt_mask = new(p_width, 0, batch["prompt_mask"].dtype, ref)
    add_ids = new(c_width, pad_id, ref.dtype, ref)
    add_mask = new(c_width, 0, batch["completion_mask"].dtype, ref)
    add_logps = new(c_width, 0.0, torch.float32, ref)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        add_prompt_ids[i, p_width - len(p) :] = torch.tensor(p)
        add_prompt_mask[i, p_width - len(p) :] = 1
        add_ids[i, : len(c)] = torch.tensor(c)
        if i < len(rows):
            add_mask[i, : len(c)] = int(rows[i].trained)
            if rows[i].logprobs is not None:
                add_logps[i, : len(c)] = torch.tensor(rows[i].logprobs, dtype=torch.float32)

    out = dict(batch)
    out["prompt_ids"] = torch.cat([_widen(batch["prompt_ids"], p_width, pad_id, True), add_prompt_ids])
    out["prompt_mask"] = torch.cat([_widen(batch["prompt_mask"], p_width, 0, True), add_prompt_mask])
    out["completion_ids"] = torch.cat([_widen(ref, c_width, pad_id, False), add_ids])
    out["completion_mask"] = torch.cat([_widen(batch["completion_mask"], c_width, 0, False), add_mask])
    advantages = batch["advantages"]
    episode_of = torch.tensor([r.episode for r in rows], dtype=torch.long, device=advantages.device)
    add_adv = advantages.new_zeros((total_rows, *advantages.shape[1:]))
    add_adv[: len(rows)] = advantages[episode_of]
    out["advantages"] = torch.cat([advantages, add_adv])
    if batch.get("tool_mask") is not None:  # every sub-call token was sampled by the policy
        out["tool_mask"] = torch.cat([_widen(batch["tool_mask"], c_width, 0, False), (add_mask > 0).long()])
    for key, fill, add in (
        ("sampling_per_token_logps", 0.0, add_logps),
        ("old_per_token_logps", 0.0, torch.zeros_like(add_logps)),
        ("importance_sampling_ratio", 1.0, torch.ones_like(add_logps)),
    ):
        t = batch.get(key)
        if t is None:
            continue
        if t.size(1) == 1 and key == "importance_sampling_ratio":  # sequence-level: one ratio per row
            out[key] = torch.cat([t, t.new_ones((total_rows, 1))])
        else:
            out[key] = torch.cat([_widen(t, c_width, fill, False), add.to(t.dtype)])
    return out


def importance_ratio(
    old: torch.Tensor,
    sampling: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    low: float | None,
    high: float | None,
) -> torch.Tensor:
    """vLLM's importance-sampling ratio exp(trainer - sampler), truncated or masked, as TRL 1.16 computes it
    for its own rows (``vllm_importance_sampling_mode``)."""
    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
    if mode in ("sequence_mask", "sequence_truncate"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode in ("sequence_truncate", "token_truncate"):
        return torch.clamp(ratio, min=low, max=high)
    if mode in ("sequence_mask", "token_mask"):
        lo = -math.inf if low is None else low
        hi = math.inf if high is None else high
        return ratio.masked_fill((ratio < lo) | (ratio > hi), 0.0)
    raise ValueError(f"unknown vllm_importance_sampling_mode {mode!r}")


# ---- the trainer side: called by FathomGRPOTrainer._generate_and_score_completions --------------------------
def add_subcall_rows(
    trainer: Any, inputs: Sequence[dict[str, Any]], batch: dict[str, Any], cap: int
) -> dict[str, Any]:
    """TRL's scored generation batch plus this rank's sub-call rows (see the module docstring); logs
    ``subcalls/rows`` (trained rows, all ranks), ``subcalls/dropped`` and ``subcalls/tokens``."""
    from trl.models.utils import disable_gradient_checkpointing

    acc, args = trainer.accelerator, trainer.args
    n_main = batch["prompt_ids"].size(0)
    if len(inputs) != n_main:
        raise RuntimeError(f"{len(inputs)} inputs but {n_main} episode rows in the generation batch")
    per_episode = [trainable(x.get("fathom_subcalls") or []) for x in inputs]
    chosen, dropped = select(per_episode, cap or n_main)
    stop = {*trainer.eos_token_ids, trainer._tokenizer.pad_token_id}
    rows = [
        SubcallRow(
            episode=e,
            prompt_ids=list(s.prompt_ids),
            ids=list(s.ids),
            logprobs=None if s.logprobs is None else list(s.logprobs),
            trained=not (trainer.mask_truncated_completions and s.ids[-1] not in stop),
        )
        for e, s in chosen
    ]
    device = batch["prompt_ids"].device
    counts = acc.gather(torch.tensor([len(rows), dropped], device=device)).view(-1, 2)
    total_rows = padded_count(int(counts[:, 0].max()), args.steps_per_generation)  # same on every rank
    metrics = trainer._metrics["train"]
    if total_rows == 0:
        metrics["subcalls/rows"].append(0.0)
        metrics["subcalls/dropped"].append(float(counts[:, 1].sum()))
        metrics["subcalls/tokens"].append(0.0)
        return batch

    out = extend_batch(batch, rows, total_rows, trainer._tokenizer.pad_token_id, trainer.pad_to_multiple_of)
    new = slice(n_main, None)
    loss_mask = out["completion_mask"][new]
    if out.get("tool_mask") is not None:
        loss_mask = loss_mask * out["tool_mask"][new]
    if "old_per_token_logps" in out:  # TRL computed them for its rows: compute ours the same way
        ids = torch.cat([out["prompt_ids"][new], out["completion_ids"][new]], dim=1)
        attention = torch.cat([out["prompt_mask"][new], out["completion_mask"][new]], dim=1)
        with (
            torch.no_grad(),
            disable_gradient_checkpointing(trainer.model, args.gradient_checkpointing_kwargs),
        ):
            old, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model,
                ids,
                attention,
                out["completion_ids"].size(1),
                batch_size=args.per_device_train_batch_size,
            )
        out["old_per_token_logps"][new] = old.to(out["old_per_token_logps"].dtype)
        if "importance_sampling_ratio" in out:
            ratio = importance_ratio(
                old,
                out["sampling_per_token_logps"][new],
                loss_mask,
                trainer.vllm_importance_sampling_mode,
                trainer.vllm_importance_sampling_clip_min,
                trainer.vllm_importance_sampling_clip_max,
            )
            out["importance_sampling_ratio"][new] = ratio.to(out["importance_sampling_ratio"].dtype)
    tokens = acc.gather(loss_mask.sum()).sum()
    out["num_items_in_batch"] = batch["num_items_in_batch"] + tokens
    metrics["subcalls/rows"].append(float(counts[:, 0].sum()))
    metrics["subcalls/dropped"].append(float(counts[:, 1].sum()))
    metrics["subcalls/tokens"].append(float(tokens))
    return out
