"""`fathom quickstart`: the embedded default job, on a CPU, with no hub and no key.

Today it builds a small dataset from the offline corpora, runs the expert policy through the real
environment (jailed REPL workers, `llm()` answered by the simulated reader) on the held-out split, and prints
a table of accuracy, reward, turns and sub-calls per family, writing ``RUN_DIR/expert_eval.jsonl`` and
``RUN_DIR/summary.json``. Training and the model baselines join it as those stages land.

This module orchestrates; it adds no logic of its own to the stages it calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from tqdm import tqdm

from fathom.env import EnvConfig, RLMAction, RLMEnvironment
from fathom.env.expert import expert_reader, expert_turn
from fathom.env.sublm import SubLM
from fathom.sandbox import Sandbox, SandboxConfig
from fathom.tasks import Task, load_tasks


async def run_expert_episode(task: Task, sub_lm: SubLM, config: EnvConfig) -> dict[str, Any]:
    """One expert episode through `step`; returns the line written to the eval file."""
    env = RLMEnvironment(config, sub_lm=sub_lm)
    started = time.perf_counter()
    try:
        obs = await env.reset_async(task=task)
        turn = 0
        while not obs.done:
            obs = await env.step_async(RLMAction(text=expert_turn(task, turn)))
            turn += 1
        breakdown = obs.reward_breakdown or {}
        return {
            "id": task.id,
            "family": task.family,
            "length_tokens": task.length_tokens,
            "answer": obs.answer,
            "gold": task.answer,
            "correct": bool(breakdown.get("correct")),
            "reward": obs.reward,
            "breakdown": breakdown,
            "turns": turn,
            "llm_calls": env.state.llm_calls,
            "wall_s": round(time.perf_counter() - started, 3),
        }
    finally:
        await env.aclose()


async def evaluate_expert(tasks: list[Task], concurrency: int = 16) -> list[dict[str, Any]]:
    config, reader = EnvConfig(), expert_reader()
    semaphore = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(tasks), desc="expert episodes", unit="ep")

    async def one(task: Task) -> dict[str, Any]:
        async with semaphore:
            row = await run_expert_episode(task, reader, config)
        bar.update()
        return row

    try:
        return list(await asyncio.gather(*(one(t) for t in tasks)))
    finally:
        bar.close()


async def _isolation() -> str:
    """The isolation this machine gives a REPL worker, as one line."""
    async with await Sandbox.start(None, SandboxConfig(), ctx_text="") as sandbox:
        return sandbox.report.describe()


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["family"]].append(row)
        groups["all"].append(row)
    return {
        name: {
            "n": len(g),
            "accuracy": sum(r["correct"] for r in g) / len(g),
            "reward": sum(r["reward"] for r in g) / len(g),
            "turns": sum(r["turns"] for r in g) / len(g),
            "llm_calls": sum(r["llm_calls"] for r in g) / len(g),
        }
        for name, g in sorted(groups.items(), key=lambda kv: (kv[0] == "all", kv[0]))
    }


def run(args: argparse.Namespace) -> int:
    console = Console()
    out = Path(args.out)
    console.print(f"[bold]FATHOM quickstart[/] -> {out}")
    console.print(asyncio.run(_isolation()))
    data_dir = out / "data"
    from fathom.cli import main as fathom_main

    status = fathom_main(
        ["data", "build", "--out", str(data_dir), "--seed", str(args.seed), "--train", str(args.train), "--eval", "0",
         "--heldout", str(args.heldout), "--heldout-lengths", *args.lengths, "--train-lengths", "8K"]
    )  # fmt: skip
    if status:
        return status
    tasks = load_tasks(data_dir / "heldout.jsonl")
    rows = asyncio.run(evaluate_expert(tasks))
    (out / "expert_eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = summarize(rows)
    (out / "summary.json").write_text(json.dumps({"expert": summary}, indent=2) + "\n")
    table = Table(title=f"expert policy on {len(tasks)} held-out tasks ({', '.join(args.lengths)} tokens)")
    for col in ("family", "n", "accuracy", "mean reward", "turns", "llm() calls"):
        table.add_column(col, justify="left" if col == "family" else "right")
    for name, s in summary.items():
        table.add_row(
            name,
            str(s["n"]),
            f"{s['accuracy']:.1%}",
            f"{s['reward']:.3f}",
            f"{s['turns']:.1f}",
            f"{s['llm_calls']:.1f}",
        )
    console.print(table)
    console.print(f"results: {out / 'expert_eval.jsonl'}, {out / 'summary.json'}")
    return 0 if summary["all"]["accuracy"] >= 0.95 else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quickstart", help="the embedded default job (CPU, offline)")
    parser.add_argument("--out", default="runs/quickstart", help="run directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=70)
    parser.add_argument("--heldout", type=int, default=70)
    parser.add_argument("--lengths", nargs="+", default=["8K", "32K", "128K"], help="held-out lengths")
    parser.set_defaults(func=run)
