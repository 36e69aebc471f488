"""Periodic evaluation during GRPO: the current weights on a fixed eval set, summarised as ``eval/*`` metrics.

The eval set is fixed for the whole run (`TaskSource.eval_set`), each rank plays its share, and results are
gathered. Sampling runs inside a forked RNG with a fixed seed, so an eval neither perturbs the training RNG
(a resumed run stays on the same curve whether or not it evaluated) nor varies between evals of equal
weights. Eval traces go to ``traces.jsonl`` with ``"kind": "eval"``. Nothing here trains.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from fathom.reward.compose import COMPONENTS
from fathom.train.rollout_func import FathomRollout


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """``eval/*`` means over rows of {family, correct, reward, components, behaviour}."""
    if not rows:
        return {}
    n = len(rows)
    out = {
        "eval/accuracy": sum(r["correct"] for r in rows) / n,
        "eval/reward": sum(r["reward"] for r in rows) / n,
        "eval/tasks": float(n),
    }
    for name in COMPONENTS:
        out[f"eval/reward/{name}"] = sum(r["components"].get(name, 0.0) for r in rows) / n
    for key in rows[0]["behaviour"]:
        out[f"eval/behaviour/{key}"] = sum(r["behaviour"][key] for r in rows) / n
    by_family: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        by_family[r["family"]].append(r["correct"])
    for family, hits in sorted(by_family.items()):
        out[f"eval/accuracy/{family}"] = sum(hits) / len(hits)
    return out


def evaluate(
    rollout_fn: FathomRollout, trainer: Any, tasks: Sequence[Any], temperature: float, seed: int, step: int
) -> dict[str, float]:
    """Play `tasks` with the trainer's weights; returns the gathered summary (same on every rank)."""
    import torch
    from accelerate.utils import gather_object

    acc = trainer.accelerator
    shard = list(tasks)[acc.process_index :: acc.num_processes]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        episodes, _ = rollout_fn.run_episodes(trainer, shard, rollout_fn.sampling(temperature))
    rows = []
    for task, episode in zip(shard, episodes, strict=True):
        b = episode.reward
        rows.append(
            {
                "task_id": task.id,
                "family": task.family,
                "correct": episode.correct,
                "reward": 0.0 if b is None else b.total,
                "components": {} if b is None else dict(b.components),
                "behaviour": episode.behaviour(),
            }
        )
        if rollout_fn.traces is not None:
            rollout_fn.traces.write(
                {
                    "kind": "eval",
                    "step": step,
                    "task_id": task.id,
                    "family": task.family,
                    "question": task.question,
                    "gold": task.answer,
                    "conversation": rollout_fn.tokenizer.decode(episode.prompt_ids + episode.completion_ids),
                    "episode": episode.to_json(),
                }
            )
    if acc.num_processes > 1:
        rows = gather_object(rows)
    return summarize(rows)
