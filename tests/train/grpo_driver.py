"""A GRPO run in its own process, for the kill-and-resume test: ``python grpo_driver.py --section.key=value ...``.

The tiny random model never answers correctly, so every environment reward is 0 and a group has no
advantage; `varied_reward` (a fixed function of the sampled ids) adds the variance that makes the weights move.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fathom.train.configfile import load_config
from fathom.train.grpo import run_grpo

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
FAST = [  # the tests' GRPO runs: small and quick on a CPU
    "--grpo.per_device_train_batch_size=2",  # one group of two rollouts per step
    "--rollout.max_new_tokens=24",
    "--rollout.max_total_tokens=160",
    "--logging.progress=false",
]


def varied_reward(completion_ids: list[list[int]], **_: object) -> list[float]:
    return [(sum(ids) % 997) / 997 for ids in completion_ids]


if __name__ == "__main__":
    run_grpo(load_config(TINY, sys.argv[1:]), [varied_reward])
