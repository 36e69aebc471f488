"""When SFT stops: the held-out transcript loss and the policy-entropy floor, measured as training runs.

SFT on a scripted teacher's transcripts can be driven to memorisation (assistant loss ~0.001), and a policy
that has memorised its transcripts samples one program per task even at temperature 1: GRPO then gets groups
without reward variance and nothing to learn from. So SFT is judged on transcripts of tasks it does not train
on (``sft.holdout``), every ``sft.eval_every`` optimizer steps:

- the best held-out assistant loss so far is kept (its trainable weights, copied to host memory);
- training stops when the held-out loss has not improved for ``sft.patience`` evaluations, or when the
  policy's mean entropy on the held-out assistant tokens (TRL's ``eval_entropy``) falls below
  ``sft.entropy_floor`` nats a token, but never before ``sft.min_epochs`` epochs: the entropy of ~100
  held-out transcripts can move by a third between two evaluations, so one low reading can stop a run
  before it has seen most of its transcripts once;
- at the end the kept weights are put back, so the exported model is the chosen one, and every evaluation
  with the reason for the choice goes into the run's summary.

This module does not split the data or build the trainer (`fathom.train.sft` does).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from transformers import TrainerCallback


@dataclass
class Evaluation:
    step: int
    epoch: float
    loss: float
    entropy: float


@dataclass
class StoppingRecord:
    """What the rule saw and chose; `summary()` goes into RUN/summary.json."""

    evaluations: list[Evaluation] = field(default_factory=list)
    best_step: int | None = None
    stopped_at: int | None = None
    reason: str = "epochs done"

    def summary(self) -> dict[str, Any]:
        best = next((e for e in self.evaluations if e.step == self.best_step), None)
        return {
            "evaluations": [asdict(e) for e in self.evaluations],
            "chosen_step": self.best_step,
            "chosen_heldout_loss": None if best is None else best.loss,
            "chosen_heldout_entropy": None if best is None else best.entropy,
            "stopped_at": self.stopped_at,
            "reason": self.reason,
        }


class HeldoutStopping(TrainerCallback):
    """Keeps the weights of the best held-out loss; stops on no improvement or entropy under the floor.

    An evaluation under the entropy floor is never the one kept: it is past the point where sampling
    still explores, whatever its loss."""

    def __init__(self, model: Any, patience: int, entropy_floor: float, min_epochs: float = 0.0) -> None:
        self.model, self.patience, self.entropy_floor = model, patience, entropy_floor
        self.min_epochs = min_epochs
        self.record = StoppingRecord()
        self._best_loss = float("inf")
        self._best_state: dict[str, Any] | None = None
        self._since_best = 0

    def _trainable_state(self) -> dict[str, Any]:
        names = {n for n, p in self.model.named_parameters() if p.requires_grad}
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items() if k in names}

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None, **kw: Any
    ):
        if metrics is None or "eval_loss" not in metrics:
            raise RuntimeError(
                "SFT evaluation returned no eval_loss: the held-out set is empty or unlabelled"
            )
        e = Evaluation(
            step=state.global_step,
            epoch=round(float(state.epoch or 0.0), 4),
            loss=float(metrics["eval_loss"]),
            entropy=float(metrics.get("eval_entropy", float("nan"))),
        )
        self.record.evaluations.append(e)
        under_floor = e.entropy < self.entropy_floor
        if e.loss < self._best_loss and not under_floor:
            self._best_loss, self._since_best = e.loss, 0
            self._best_state = self._trainable_state()
            self.record.best_step = e.step
        else:
            self._since_best += 1
        if e.epoch < self.min_epochs:  # judged and perhaps kept, but not yet a reason to stop
            return control
        if under_floor:
            self.record.reason = f"held-out entropy {e.entropy:.4f} under the floor {self.entropy_floor}"
        elif self._since_best >= self.patience:
            self.record.reason = f"held-out loss did not improve for {self.patience} evaluations"
        else:
            return control
        self.record.stopped_at = e.step
        control.should_training_stop = True
        return control

    def restore_best(self) -> None:
        """Put the kept weights back (a no-op when the last evaluation was the best)."""
        if self._best_state is None:
            return
        _, unexpected = self.model.load_state_dict(self._best_state, strict=False)
        if unexpected:
            raise RuntimeError(f"restoring the best SFT weights: unexpected keys {unexpected[:3]}")
