"""KL from the policy to the model its LoRA starts from, logged as TRL's ``kl`` while the loss ignores it.

With ``grpo.beta = 0`` TRL loads no reference model and logs no ``kl``. `ReferenceKL`, a mixin of
`fathom.train.grpo`'s trainer switched on by ``grpo.log_kl``, measures it on every generation batch: a
no-grad forward of the batch with the LoRA adapter switched off — the model the fresh adapter started from,
i.e. the SFT model when ``model.init_from`` is a full model directory — and TRL's own k3 estimator
``exp(r) - r - 1`` with ``r = log pi_ref - log pi``, averaged over the trained completion tokens (TRL's loss
mask: completion mask times env mask) of every rank. The policy's log-probs are TRL's
``old_per_token_logps`` where it computed them (always with vLLM), else one more no-grad forward. They
belong to the weights the batch was sampled with, before the step's update; with ``num_iterations = 1``
those are the weights TRL's loss scores.

Cost: one extra no-grad forward per generation batch (two where TRL computed no old log-probs: HF generate
with generation aligned to optimizer steps). The objective is unchanged.

Not covered: continuing an SFT adapter (``model.init_from`` an adapter dir: adapter off is the base model,
not the SFT model) and full fine-tuning (no adapter to switch off); `check_log_kl` refuses both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fathom.train.config import ConfigError, TrainConfig


def check_log_kl(config: TrainConfig) -> None:
    """Refuse ``grpo.log_kl`` where switching the adapter off does not give the model training started from."""
    if not config.grpo.log_kl:
        return
    if not config.model.lora:
        raise ConfigError(
            "grpo.log_kl needs model.lora = true: the reference is the policy with its adapter off"
        )
    init = config.model.init_from
    if init and (Path(init) / "adapter_config.json").exists():
        raise ConfigError(
            f"grpo.log_kl: model.init_from {init} is an adapter, so the adapter-off model is the base, not the SFT "
            "model; start from the merged SFT model (RUN/final/model) or set grpo.log_kl = false"
        )


def k3_sums(policy_logps: Any, ref_logps: Any, mask: Any) -> Any:
    """(sum of k3 over the masked tokens, number of masked tokens): tensors (B, T), (B, T), (B, T) -> (2,)."""
    import torch

    r = ref_logps - policy_logps
    k3 = torch.exp(r) - r - 1
    return torch.stack([(k3 * mask).sum(), mask.sum().to(k3.dtype)])


class ReferenceKL:
    """Mixin over TRL's GRPOTrainer: ``kl`` to the adapter-off model on each generation batch when on."""

    fathom_log_kl: bool = False

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        output = super()._generate_and_score_completions(inputs)  # type: ignore[misc]
        if self.fathom_log_kl and self.model.training:  # type: ignore[attr-defined]
            self._metrics["train"]["kl"].append(self.reference_kl(output))  # type: ignore[attr-defined]
        return output

    def reference_kl(self, batch: dict[str, Any]) -> float:
        """The mean k3 KL(policy || adapter-off model) over `batch`'s trained tokens on every rank."""
        import torch
        from trl.models.utils import disable_gradient_checkpointing
        from trl.trainer.utils import use_adapter

        trainer: Any = self
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        keep = batch["completion_ids"].size(1)  # score only the completion positions
        mask = batch["completion_mask"]
        if "tool_mask" in batch:  # our env_mask: environment replies are not trained, so not measured
            mask = mask * batch["tool_mask"]
        size = trainer.args.per_device_train_batch_size
        checkpointing = trainer.args.gradient_checkpointing_kwargs
        with torch.no_grad(), disable_gradient_checkpointing(trainer.model, checkpointing):
            policy = batch.get("old_per_token_logps")
            if policy is None:
                policy, _, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.model, ids, attention, keep, batch_size=size
                )
            with use_adapter(trainer.accelerator.unwrap_model(trainer.model), adapter_name=None):
                ref, _, _ = trainer._get_per_token_logps_and_entropies(
                    trainer.model, ids, attention, keep, batch_size=size
                )
        total, count = trainer.accelerator.reduce(k3_sums(policy, ref, mask), reduction="sum").tolist()
        return total / max(count, 1.0)
