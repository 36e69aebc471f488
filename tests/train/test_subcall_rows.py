"""The sub-call row builder: selection under a cap, widths and padding sides, masks, advantages, log-probs,
the importance-sampling ratio and the config checks of ``rollout.train_subcalls``."""

from __future__ import annotations

import math

import pytest
import torch

from fathom.rollout.episode import SubCall
from fathom.train.config import ConfigError, GRPOSection, RolloutSection, TrainConfig
from fathom.train.subcall_rows import (
    SubcallRow,
    extend_batch,
    importance_ratio,
    padded_count,
    select,
    trainable,
)

PAD = 0


def call(n: int, tag: int = 0, adapter: bool = True) -> SubCall:
    return SubCall("q", 5, "r", 1, prompt_ids=[tag] * 2, ids=[tag + 1] * n, adapter=adapter)


def main_batch(with_vllm: bool = True) -> dict:
    """Two episode rows as TRL builds them: prompts left-padded to 3, completions right-padded to 4."""
    batch = {
        "prompt_ids": torch.tensor([[PAD, 11, 12], [21, 22, 23]]),
        "prompt_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]),
        "completion_ids": torch.tensor([[13, 14, 15, PAD], [24, 25, 26, 27]]),
        "completion_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]),
        "tool_mask": torch.tensor([[1, 0, 1, 1], [1, 1, 0, 1]]),
        "advantages": torch.tensor([0.5, -0.5]),
        "num_items_in_batch": torch.tensor(5),
    }
    if with_vllm:
        batch["sampling_per_token_logps"] = torch.tensor([[-1.0, 0.0, -2.0, 0.0], [-1.0, -1.0, 0.0, -3.0]])
        batch["old_per_token_logps"] = batch["sampling_per_token_logps"] + 0.1
        batch["importance_sampling_ratio"] = torch.full((2, 4), 0.9)
    return batch


def test_trainable_keeps_the_policys_answers_that_produced_tokens():
    calls = [call(2), call(0), call(3, adapter=False), call(1, tag=7)]
    assert [len(c.ids) for c in trainable(calls)] == [2, 1]


def test_select_is_round_robin_under_the_cap_and_counts_the_dropped():
    a, b, c = [call(1, 0), call(1, 10), call(1, 20)], [call(1, 30)], [call(1, 40), call(1, 50)]
    kept, dropped = select([a, b, c], cap=4)
    # first calls of every episode (a0, b0, c0), then the second of a: back in episode order
    assert [(e, s.ids[0]) for e, s in kept] == [(0, 1), (0, 11), (1, 31), (2, 41)]
    assert dropped == 2
    everything, none = select([a, b, c], cap=10)
    assert len(everything) == 6 and none == 0
    assert select([[], []], cap=3) == ([], 0)
    with pytest.raises(ValueError):
        select([a], cap=-1)


def test_padded_count():
    assert [padded_count(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8]
    assert padded_count(3, 1) == 3


def test_extend_batch_widens_pads_and_copies_each_rows_episode_advantage():
    batch = main_batch()
    rows = [
        SubcallRow(1, prompt_ids=[31, 32, 33, 34], ids=[35, 36], logprobs=[-0.5, -0.25]),
        SubcallRow(0, prompt_ids=[41], ids=[42, 43, 44, 45, 46], logprobs=[-1.0] * 5),
    ]
    out = extend_batch(batch, rows, total_rows=4, pad_id=PAD)
    # prompt width 4 (the longest sub-call prompt), completion width 5 (the longest sub-call answer)
    assert out["prompt_ids"].tolist() == [
        [PAD, PAD, 11, 12],
        [PAD, 21, 22, 23],
        [31, 32, 33, 34],
        [PAD, PAD, PAD, 41],
        [PAD, PAD, PAD, PAD],  # padding row: one attended pad token
        [PAD, PAD, PAD, PAD],
    ]
    assert out["prompt_mask"].tolist() == [
        [0, 0, 1, 1],
        [0, 1, 1, 1],
        [1, 1, 1, 1],
        [0, 0, 0, 1],
        [0, 0, 0, 1],
        [0, 0, 0, 1],
    ]
    assert out["completion_ids"].tolist() == [
        [13, 14, 15, PAD, PAD],
        [24, 25, 26, 27, PAD],
        [35, 36, PAD, PAD, PAD],
        [42, 43, 44, 45, 46],
        [PAD] * 5,
        [PAD] * 5,
    ]
    mask = [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1] * 5, [0] * 5, [0] * 5]
    assert out["completion_mask"].tolist() == mask
    assert out["tool_mask"].tolist()[:2] == [[1, 0, 1, 1, 0], [1, 1, 0, 1, 0]]  # episode rows unchanged
    assert out["tool_mask"].tolist()[2:] == mask[2:]  # every sub-call token is the policy's
    assert out["advantages"].tolist() == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0]  # row 2 is episode 1's
    assert out["sampling_per_token_logps"][2].tolist() == [-0.5, -0.25, 0.0, 0.0, 0.0]
    assert out["sampling_per_token_logps"][3].tolist() == [-1.0] * 5
    assert torch.equal(out["sampling_per_token_logps"][:2, :4], batch["sampling_per_token_logps"])
    assert torch.equal(out["old_per_token_logps"][:2, :4], batch["old_per_token_logps"])
    assert out["importance_sampling_ratio"].shape == (6, 5)
    assert torch.equal(out["importance_sampling_ratio"][:2, :4], batch["importance_sampling_ratio"])
    assert out["num_items_in_batch"].item() == 5  # the caller adds the new tokens (a sum over ranks)
    assert batch["prompt_ids"].shape == (2, 3)  # the input batch is left as it was


def test_extend_batch_masks_a_truncated_answer_but_keeps_it_attended():
    out = extend_batch(main_batch(False), [SubcallRow(0, [7], [8, 9], None, trained=False)], 1, PAD)
    assert out["completion_mask"][2].tolist() == [0, 0, 0, 0]
    assert out["tool_mask"][2].tolist() == [0, 0, 0, 0]
    assert out["completion_ids"][2].tolist() == [8, 9, PAD, PAD]
    assert "sampling_per_token_logps" not in out and "old_per_token_logps" not in out


def test_extend_batch_keeps_a_sequence_level_ratio_one_per_row_and_rounds_widths():
    batch = main_batch()
    batch["importance_sampling_ratio"] = torch.tensor([[0.8], [1.2]])
    out = extend_batch(batch, [SubcallRow(0, [1], [2], [-0.1])], 2, PAD, pad_to_multiple_of=4)
    assert out["importance_sampling_ratio"].flatten().tolist() == pytest.approx([0.8, 1.2, 1.0, 1.0])
    assert out["prompt_ids"].shape == (4, 4) and out["completion_ids"].shape == (4, 4)


def test_extend_batch_refuses_what_it_cannot_build():
    batch = main_batch()
    with pytest.raises(ValueError, match="without them"):
        extend_batch(batch, [SubcallRow(0, [1], [2], None)], 1, PAD)
    with pytest.raises(ValueError, match="log-probs"):
        extend_batch(batch, [SubcallRow(0, [1], [2, 3], [-1.0])], 1, PAD)
    with pytest.raises(ValueError, match="outside"):
        extend_batch(batch, [SubcallRow(2, [1], [2], [-1.0])], 1, PAD)
    with pytest.raises(ValueError, match="do not fit"):
        extend_batch(batch, [SubcallRow(0, [1], [2], [-1.0])] * 2, 1, PAD)
    with pytest.raises(ValueError, match="multimodal"):
        extend_batch({**batch, "pixel_values": torch.zeros(2, 3)}, [], 1, PAD)
    with pytest.raises(ValueError, match="beta"):
        extend_batch({**batch, "ref_per_token_logps": torch.zeros(2, 4)}, [], 1, PAD)


def test_importance_ratio_matches_trls_modes():
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    sampling = torch.tensor([[-1.5, -1.0, float("nan")]])
    mask = torch.tensor([[1, 1, 0]])
    token = importance_ratio(old, sampling, mask, "token_truncate", None, 2.0)
    assert token[0, :2].tolist() == pytest.approx([math.exp(0.5), math.exp(-1.0)])
    assert token[0, 2].item() == 1.0  # masked (and NaN) positions get no correction
    masked = importance_ratio(old, sampling, mask, "token_mask", 0.5, 1.5)
    assert masked[0].tolist() == pytest.approx([0.0, 0.0, 1.0])  # e^0.5 > 1.5 and e^-1 < 0.5 are masked out
    seq = importance_ratio(old, sampling, mask, "sequence_truncate", None, 3.0)
    assert seq.shape == (1, 1) and seq.item() == pytest.approx(math.exp(-0.5))
    assert importance_ratio(old, sampling, mask, "sequence_mask", 0.7, 1.0).item() == 0.0
    with pytest.raises(ValueError):
        importance_ratio(old, sampling, mask, "bogus", None, None)


def test_config_checks():
    assert RolloutSection().train_subcalls is False and RolloutSection().max_subcall_rows == 0
    with pytest.raises(ConfigError, match="sub_lm"):
        RolloutSection(train_subcalls=True, sub_lm="expert")
    with pytest.raises(ConfigError, match="max_subcall_rows"):
        RolloutSection(max_subcall_rows=-1)
    with pytest.raises(ConfigError, match="beta"):
        TrainConfig(rollout=RolloutSection(train_subcalls=True), grpo=GRPOSection(beta=0.1))
    assert TrainConfig(rollout=RolloutSection(train_subcalls=True)).rollout.train_subcalls
