"""``grpo.group_by_length``: fewer padded tokens in the trainer's forwards, the same loss and gradient.

The real tiny-model trainer and environment on CPU: one generation batch of four rollouts (two groups of
two, two micro-batches), scored once. The untrained model runs every episode to the same token budget, so the
rows are then cut to different lengths (as if episodes had ended sooner) and widened by extra padding (as if
the batch's widest row were elsewhere). The same rows go through TRL's path (shuffled micro-batches, every
forward as wide as the batch) and through ours (length-grouped, each forward cut to its longest row)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

from fathom.train.configfile import load_config
from fathom.train.grpo import build_grpo
from fathom.train.padding import completion_lengths, length_grouped, permuted
from fathom.train.tasksource import slot_prompt

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from grpo_driver import FAST, TINY  # noqa: E402

WIDEN = 17  # extra right padding: the batch's widest row is longer than any row here
CUTS = (1.0, 0.4, 0.8, 0.2)  # each row's share of its completion kept


@pytest.fixture(scope="module")
def grouped(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("padding")
    extra = ["--grpo.gradient_accumulation_steps=2", "--grpo.group_by_length=true", "--grpo.max_steps=1"]
    config = load_config(TINY, [*FAST, f"--run.run_dir={run_dir}", *extra])
    trainer = build_grpo(config).trainer
    trainer.model.train()
    first = trainer._prepare_inputs([{"prompt": slot_prompt(i // 2)} for i in range(4)])
    return trainer, first


def whole(chunks):
    keys = chunks[0].keys()
    return {k: chunks[0][k] if chunks[0][k].ndim == 0 else torch.cat([c[k] for c in chunks]) for k in keys}


def varied(batch):
    """Rows cut to `CUTS` of their completions and widened by `WIDEN` columns of padding."""
    out = dict(batch)
    lengths = completion_lengths(batch)
    keep = torch.zeros_like(batch["completion_mask"])
    for row, share in enumerate(CUTS):
        keep[row, : max(1, int(share * lengths[row]))] = 1
    for key in ("completion_mask", "tool_mask"):
        out[key] = batch[key] * keep
    out["num_items_in_batch"] = (out["completion_mask"] * out["tool_mask"]).sum()
    pad = torch.zeros(batch["completion_ids"].size(0), WIDEN, dtype=batch["completion_ids"].dtype)
    for key in ("completion_ids", "completion_mask", "tool_mask"):
        out[key] = torch.cat([out[key], pad.to(batch[key].dtype)], dim=1)
    for key in ("old_per_token_logps", "sampling_per_token_logps", "importance_sampling_ratio"):
        if batch.get(key) is not None and batch[key].dim() == 2:
            out[key] = torch.cat([batch[key], pad.to(batch[key].dtype)], dim=1)
    return out


def step_gradient(trainer, micro_batches, group_by_length):
    """Loss and LoRA gradient of one optimizer step accumulated over `micro_batches`."""
    trainer.fathom_group_by_length = group_by_length
    trainer.current_gradient_accumulation_steps = len(micro_batches)  # set by the loop we bypass
    lora = [p for p in trainer.model.parameters() if p.requires_grad]
    trainer.model.zero_grad()
    total = 0.0
    for batch in micro_batches:
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        total += loss.item()
    trainer.fathom_group_by_length = True
    return total, [p.grad.clone() for p in lora]


def test_the_trainer_buffers_length_grouped_micro_batches(grouped):
    trainer, first = grouped
    chunks = trainer._buffered_inputs
    assert len(chunks) == 2 and chunks[0] is first and first["completion_ids"].size(0) == 2
    batch = varied(whole(chunks))
    lengths = completion_lengths(batch).tolist()
    grouped_lengths = [completion_lengths(c).tolist() for c in length_grouped(batch, 2)]
    assert grouped_lengths == [sorted(lengths, reverse=True)[:2], sorted(lengths, reverse=True)[2:]]
    with pytest.raises(ValueError, match="equal"):
        length_grouped(batch, 3)


def test_each_forward_is_cut_to_its_longest_row(grouped):
    trainer, _ = grouped
    chunks = length_grouped(varied(whole(trainer._buffered_inputs)), 2)
    seen = []
    hook = trainer.model.get_input_embeddings().register_forward_hook(
        lambda _m, args, _out: seen.append(args[0].size(1))
    )
    trainer.current_gradient_accumulation_steps = 2
    with torch.no_grad():
        for chunk in chunks:
            trainer.compute_loss(trainer.model, chunk)
    hook.remove()
    prompt = chunks[0]["prompt_ids"].size(1)
    assert seen == [prompt + int(completion_lengths(c).max()) for c in chunks]
    assert seen[0] > seen[1] and seen[0] < prompt + chunks[0]["completion_ids"].size(1)


@pytest.mark.slow  # two optimizer steps' backward passes: ~30 s on 2 shared cores
def test_the_step_has_the_same_loss_and_gradient(grouped):
    trainer, _ = grouped
    batch = varied(whole(trainer._buffered_inputs))
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])  # the tiny model's rewards tie
    torch.manual_seed(0)
    trl_chunks = split_tensor_dict(shuffle_sequence_dict(batch), 2)  # TRL: shuffled, padded to the batch
    ours = length_grouped(batch, 2)
    trl_loss, trl_grad = step_gradient(trainer, trl_chunks, group_by_length=False)
    our_loss, our_grad = step_gradient(trainer, ours, group_by_length=True)
    assert any(torch.count_nonzero(g) > 0 for g in trl_grad)  # a real signal to compare
    assert our_loss == pytest.approx(trl_loss, rel=1e-5, abs=1e-7)
    for a, b in zip(our_grad, trl_grad, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


def test_chunked_log_probs_match_untrimmed_in_the_callers_order(grouped):
    trainer, _ = grouped
    batch = varied(whole(trainer._buffered_inputs))
    batch = permuted(batch, torch.tensor([3, 0, 2, 1]))  # rows out of length order: the result keeps it
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)
    out = {}
    for flag in (False, True):
        trainer.fathom_group_by_length = flag
        with torch.no_grad():
            out[flag] = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, keep, batch_size=1, compute_entropy=True
            )
    trainer.fathom_group_by_length = True
    for ours, theirs in zip(out[True][:2], out[False][:2], strict=True):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    attended = batch["completion_mask"].bool()
    assert torch.count_nonzero(out[True][0][~attended]) == 0  # TRL's zeros where nothing is scored
    assert torch.count_nonzero(out[True][0][attended]) == int(attended.sum())


def test_bnpo_is_refused_with_grouping():
    from fathom.train.config import ConfigError, GRPOSection

    with pytest.raises(ConfigError, match="bnpo"):
        GRPOSection(group_by_length=True, loss_type="bnpo")
