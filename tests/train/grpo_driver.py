"""A GRPO run in its own process, for the kill-and-resume test: ``python grpo_driver.py --section.key=value ...``.

The tiny random model never answers correctly, so every environment reward is 0 and a group has no
advantage; `varied_reward` (a fixed function of the sampled ids) adds the variance that makes the weights move.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fathom.train.configfile import load_config
from fathom.train.grpo import run_grpo

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
FAST = [  # the tests' GRPO runs: small and quick on a CPU
    "--grpo.per_device_train_batch_size=2",  # one group of two rollouts per step
    "--rollout.max_new_tokens=24",
    "--rollout.max_total_tokens=160",
    "--logging.progress=false",
]


@contextlib.contextmanager
def token_logps(trainer: Any) -> Iterator[dict[str, Any]]:
    """While inside: ``captured["logps"]`` is the (B, T) log-prob tensor of the trainer's last loss forward,
    its gradient kept, so a test reads d loss / d log p(token) after ``backward()``."""
    captured: dict[str, Any] = {}
    original = trainer._get_per_token_logps_and_entropies

    def capture(*args: Any, **kwargs: Any) -> Any:
        logps, entropies, aux = original(*args, **kwargs)
        logps.retain_grad()
        captured["logps"] = logps
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = capture
    try:
        yield captured
    finally:
        trainer._get_per_token_logps_and_entropies = original


def varied_reward(completion_ids: list[list[int]], **_: object) -> list[float]:
    return [(sum(ids) % 997) / 997 for ids in completion_ids]


if __name__ == "__main__":
    run_grpo(load_config(TINY, sys.argv[1:]), [varied_reward])
