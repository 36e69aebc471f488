"""``grpo.log_kl``: KL to the adapter-off model on the real tiny model (CPU), without touching the loss.

A fresh LoRA adapter has B = 0, so the policy is the reference and the KL is zero; once the adapter's
weights move, it is positive. Also: the k3 estimator's values, the refused setups, and the policy
log-probs TRL already computed (the vLLM path) being used as they are.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fathom.train.config import ConfigError
from fathom.train.configfile import load_config
from fathom.train.grpo import build_grpo
from fathom.train.reference_kl import check_log_kl, k3_sums

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("kl")
    config = load_config(TINY, [f"--run.run_dir={run_dir}", "--grpo.log_kl=true", "--logging.progress=false"])
    return build_grpo(config)


def batch_for(trainer, rows=2, prompt=12, completion=9):
    g = torch.Generator().manual_seed(0)
    vocab = trainer.processing_class.vocab_size
    completion_mask = torch.ones(rows, completion, dtype=torch.long)
    completion_mask[1, -3:] = 0  # padding after the second row's end
    tool_mask = torch.ones(rows, completion, dtype=torch.long)
    tool_mask[0, 2:5] = 0  # an environment reply inside the first row
    return {
        "prompt_ids": torch.randint(0, vocab, (rows, prompt), generator=g),
        "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
        "completion_ids": torch.randint(0, vocab, (rows, completion), generator=g),
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
    }


def test_k3_is_zero_for_equal_log_probs_and_counts_only_masked_tokens():
    policy = torch.log(torch.tensor([[0.5, 0.25, 0.1]]))
    ref = torch.log(torch.tensor([[0.5, 0.5, 0.9]]))
    mask = torch.tensor([[1, 1, 0]])
    total, count = k3_sums(policy, ref, mask).tolist()
    assert count == 2
    assert total == pytest.approx(
        (1 - 1 - 0) + (2 - math.log(2) - 1)
    )  # exp(r) - r - 1 per token, r = ref - pi
    assert k3_sums(policy, policy, torch.ones(1, 3)).tolist() == [0.0, 3.0]


def test_kl_is_zero_for_a_fresh_adapter_and_positive_once_it_moves(run):
    trainer = run.trainer
    assert trainer.fathom_log_kl and trainer.beta == 0.0 and trainer.ref_model is None  # objective unchanged
    batch = batch_for(trainer)
    assert trainer.reference_kl(batch) == pytest.approx(0.0, abs=1e-7)
    lora_b = [p for n, p in trainer.model.named_parameters() if "lora_B" in n]
    assert lora_b and all(torch.count_nonzero(p) == 0 for p in lora_b)
    saved = [p.detach().clone() for p in lora_b]
    try:
        with torch.no_grad():
            for i, p in enumerate(lora_b):
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.5)
        moved = trainer.reference_kl(batch)
        assert moved > 1e-3
        # TRL's own old log-probs (always there with vLLM) are used as the policy's: a reference-like
        # "policy" gives zero, so the value comes from them and not from a second forward
        with torch.no_grad(), trainer.accelerator.unwrap_model(trainer.model).disable_adapter():
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
            ref, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, 9)
        assert trainer.reference_kl({**batch, "old_per_token_logps": ref}) == pytest.approx(0.0, abs=1e-7)
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved, strict=True):
                p.copy_(s)


def test_log_kl_is_refused_where_adapter_off_is_not_the_start(tmp_path):
    with pytest.raises(ConfigError, match=r"needs model\.lora = true"):
        check_log_kl(load_config(TINY, ["--grpo.log_kl=true", "--model.lora=false"]))
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ConfigError, match="is an adapter, so the adapter-off model is the base"):
        check_log_kl(load_config(TINY, ["--grpo.log_kl=true", f"--model.init_from={adapter}"]))
    check_log_kl(load_config(TINY, ["--model.lora=false"]))  # off: nothing to check
