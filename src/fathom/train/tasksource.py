"""Which task each GRPO group trains on, and the fixed eval set.

TRL feeds `rollout_func` a prompt column; ours holds only a slot number (``"fathom-slot:17"``), repeated
``num_generations`` times per group. The task is a pure function of (seed, tier, step, slot), so the rollouts
of a group share one task, every rank agrees on it, a resumed run draws exactly the tasks the killed run
would have, and the curriculum can change the tier between steps without rebuilding the dataset.

A tier is (lengths x families x difficulties); its families default to `SEEN_FAMILIES`, and a tier, train
file or eval file that names an unseen family (`fathom.tasks.UNSEEN_FAMILIES`) is refused. Tasks are
generated on the fly (milliseconds up to 128K
tokens, see bench/RESULTS.md) or, when a train file is given, drawn from its tasks that fit the tier. This
module does not run episodes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from fathom.tasks import SEEN_FAMILIES, Corpora, Task, generate_task, load_tasks, refuse_unseen
from fathom.train.config import TierConfig

SLOT_PREFIX = "fathom-slot:"


def slot_prompt(slot: int) -> str:
    return f"{SLOT_PREFIX}{slot}"


def parse_slot(prompt: object) -> int:
    if not isinstance(prompt, str) or not prompt.startswith(SLOT_PREFIX):
        raise ValueError(f"rollout_func got a prompt that is not a FATHOM slot: {prompt!r:.80}")
    return int(prompt[len(SLOT_PREFIX) :])


def draw(*parts: object) -> int:
    """A 63-bit number from the parts, the same on every machine and Python (no `hash()` salt)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


class TaskSource:
    def __init__(self, tiers: Sequence[TierConfig], seed: int, train_file: str | Path | None = None) -> None:
        self.tiers, self.seed = list(tiers), seed
        for t in self.tiers:
            refuse_unseen(t.families, f"curriculum tier {t.name!r}")
        self.corpora = Corpora()
        self.pool: list[Task] | None = load_tasks(train_file) if train_file else None
        if self.pool is not None:
            refuse_unseen((task.family for task in self.pool), f"train file {train_file}")
        self._by_tier: dict[int, list[Task]] = {}
        self._cache: dict[tuple[int, int, int], Task] = {}
        if self.pool is not None:
            for i in range(len(self.tiers)):
                if not self._tier_pool(i):
                    raise ValueError(
                        f"{train_file} has no task for tier {self.tiers[i].name!r} "
                        f"(lengths {self.tiers[i].lengths}, difficulties {self.tiers[i].difficulties})"
                    )

    def _tier_pool(self, tier: int) -> list[Task]:
        if tier not in self._by_tier:
            t = self.tiers[tier]
            families = t.families or SEEN_FAMILIES
            self._by_tier[tier] = [
                task
                for task in self.pool or ()
                if task.length_tokens in t.lengths
                and task.family in families
                and task.difficulty in t.difficulties
            ]
        return self._by_tier[tier]

    def generate(self, tier: int, number: int, purpose: str) -> Task:
        """The `number`-th task of a tier for `purpose` (train draws, eval sets): deterministic."""
        t = self.tiers[tier]
        h = draw(self.seed, purpose, t.name, number)
        if self.pool is not None:
            pool = self._tier_pool(tier)
            return pool[h % len(pool)]
        families = t.families or SEEN_FAMILIES
        family = families[h % len(families)]
        length = t.lengths[(h // len(families)) % len(t.lengths)]
        difficulty = t.difficulties[(h // (len(families) * len(t.lengths))) % len(t.difficulties)]
        return generate_task(family, h, length, difficulty, self.corpora)

    def task(self, tier: int, step: int, slot: int) -> Task:
        """The task of the group in `slot` at optimizer step `step` (the G rollouts of a group share it)."""
        key = (tier, step, slot)
        if key not in self._cache:
            if len(self._cache) > 4096:  # a step's groups are looked up together; older ones are not needed
                self._cache.clear()
            self._cache[key] = self.generate(tier, draw("step", step, "slot", slot), "train")
        return self._cache[key]

    def eval_set(self, tier: int, count: int, seed: int, eval_file: str | Path | None = None) -> list[Task]:
        """A fixed eval set: the first `count` tasks of a file, or `count` generated from a tier and seed."""
        if eval_file:
            tasks = load_tasks(eval_file)[:count]
            refuse_unseen((task.family for task in tasks), f"eval file {eval_file}")
            return tasks
        tier = tier % len(self.tiers)
        return [self.generate(tier, draw("eval", seed, i), "eval") for i in range(count)]
