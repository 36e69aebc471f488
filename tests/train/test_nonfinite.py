"""A non-finite gradient skips its optimizer step (weights and Adam moments untouched) and is recorded."""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from fathom.train.nonfinite import SkipNonFiniteSteps, grads_finite


class Poisoned(nn.Module):
    """A linear regression whose loss is NaN on the rows marked ``poison``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x, y, poison):
        loss = ((self.lin(x).squeeze(-1) - y) ** 2).mean()
        return {"loss": loss * torch.where(poison.any(), torch.tensor(float("nan")), torch.tensor(1.0))}


def rows(n: int, poisoned_at: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(n, 4, generator=g)
    return [{"x": xs[i], "y": xs[i].sum(), "poison": torch.tensor(i == poisoned_at)} for i in range(n)]


def test_grads_finite_sees_nan_and_inf():
    a, b = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(2))
    assert grads_finite([a, b])  # no gradients yet
    a.grad, b.grad = torch.ones(3), torch.ones(2)
    assert grads_finite([a, b])
    b.grad = torch.tensor([1.0, math.inf])
    assert not grads_finite([a, b])
    b.grad = torch.tensor([float("nan"), 0.0])
    assert not grads_finite([a, b])


def test_trainer_skips_the_poisoned_step_and_keeps_training(tmp_path):
    torch.manual_seed(0)
    model = Poisoned()
    guard = SkipNonFiniteSteps()
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=1,
        max_steps=6,
        learning_rate=0.05,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
        remove_unused_columns=False,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows(6, poisoned_at=2), callbacks=[guard])
    # no shuffling, so row 2 is the third step's batch
    trainer.get_train_dataloader = lambda: torch.utils.data.DataLoader(
        rows(6, poisoned_at=2), batch_size=1, collate_fn=trainer.data_collator
    )
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert guard.skipped == [3]
    after = list(model.parameters())
    assert all(torch.isfinite(p).all() for p in after)  # without the guard every weight is NaN from step 3 on
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))  # the other steps trained
