"""`fathom quickstart`: the embedded default job, on a CPU, with no hub and no key.

Every stage is the real command, run in this process on a small scale:

1. `fathom data build` — a small held-out split at 8K, 32K and 128K tokens (4x–64x the tiny model's window);
2. `fathom eval` of the scripted **expert** (the upper bound), the model answering **directly** from the
   document truncated to its window (what the original FATHOM trained), and the same untrained model
   **in the scaffold** (`rlm`);
3. `fathom sft` on expert transcripts, then a few steps of `fathom grpo` with the environment in the loop;
4. `fathom eval` of the trained model in the scaffold, and `fathom report` (PNG plots + HTML).

The model is the tiny random-initialised `tiny-smol` (configs/tiny-cpu.toml): SmolLM2-135M takes over a
minute per turn on two cores, which does not fit training and four evaluations into 15 minutes. So the
figures are real but prove the pipeline, not learning; `configs/smollm2-135m-gpu.toml` is the recipe that
learns (see README). This module only sequences the stages.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "tiny-cpu.toml"


def _stage(console: Console, title: str, argv: list[str]) -> None:
    from fathom.cli import main as fathom_main

    console.rule(f"[bold]{title}")
    console.print("$ fathom " + " ".join(argv), style="dim")
    started = time.perf_counter()
    status = fathom_main(argv)
    if status:
        raise SystemExit(f"quickstart: `fathom {' '.join(argv)}` failed with status {status}")
    console.print(f"[green]done[/] in {time.perf_counter() - started:.0f} s")


def _row(name: str, summary_file: Path) -> list[str]:
    summary: dict[str, Any] = json.loads(summary_file.read_text())
    s = summary["groups"]["all"]
    return [
        name,
        str(s["n"]),
        f"{s['accuracy']:.0%}",
        f"{s['ci_low']:.0%}-{s['ci_high']:.0%}",
        f"{s.get('reward', 0):.3f}",
        f"{s.get('turns', 0):.1f}",
        f"{s.get('llm_calls', 0):.1f}",
        f"{s.get('tokens', 0):,.0f}",
    ]


def run(args: argparse.Namespace) -> int:
    console = Console(width=max(Console().width, 100))  # the results table must not wrap in a log
    out = Path(args.out).resolve()
    started = time.perf_counter()
    console.print(f"[bold]FATHOM quickstart[/] -> {out}  (recipe {args.config})")
    data, evals = out / "data", out / "eval"
    heldout = data / "heldout.jsonl"
    _stage(console, "1/6 data", [
        "data", "build", "--out", str(data), "--seed", str(args.seed), "--train", "0", "--eval", "0",
        "--heldout", str(args.heldout), "--heldout-lengths", *args.lengths, "--difficulties", "medium",
        "--heldout-unseen", str(args.heldout), "--heldout-unseen-lengths", *args.lengths,
    ])  # fmt: skip
    common = ["--tasks", str(heldout), "--overwrite"]
    _stage(
        console,
        "2/6 expert (upper bound)",
        ["eval", "--policy", "expert", "--out", str(evals / "expert"), *common],
    )
    _stage(console, "3/6 baselines: direct on a truncated document, untrained model in the scaffold", [
        "eval", "--policy", "direct", "--model", args.model, "--label", "direct (untrained)",
        "--out", str(evals / "direct"), *common,
    ])  # fmt: skip
    _stage(console, "3/6 baselines (continued)", [
        "eval", "--policy", "rlm", "--model", args.model, "--label", "rlm (untrained)",
        "--out", str(evals / "rlm-untrained"), *common,
    ])  # fmt: skip
    sft_dir, grpo_dir = out / "sft", out / "grpo"
    _stage(console, "4/6 SFT on expert transcripts", [
        "sft", "--config", args.config, f"--run.run_dir={sft_dir}", f"--model.name={args.model}",
        "--model.lora=false", f"--sft.num_tasks={args.sft_tasks}", f"--sft.epochs={args.sft_epochs}",
    ])  # fmt: skip
    _stage(console, "5/6 GRPO with the environment in the loop", [
        "grpo", "--config", args.config, f"--run.run_dir={grpo_dir}", f"--model.name={args.model}",
        f"--model.init_from={sft_dir / 'final' / 'model'}", f"--grpo.max_steps={args.grpo_steps}",
    ])  # fmt: skip
    trained = grpo_dir / "final" / "merged"
    _stage(console, "6/6 trained model in the scaffold, and the report", [
        "eval", "--policy", "rlm", "--model", str(trained), "--label", "rlm (SFT+GRPO)",
        "--out", str(evals / "rlm-trained"), *common,
    ])  # fmt: skip
    # One report over the training run and every evaluation: the report follows a link to the evals.
    link = grpo_dir / "evals"
    if not link.exists():
        link.symlink_to(evals, target_is_directory=True)
    _stage(console, "report", ["report", str(grpo_dir), "--out", str(out / "report")])

    table = Table(title=f"held-out: {args.heldout} tasks at {', '.join(args.lengths)} tokens ({args.model})")
    for col in ("policy", "n", "accuracy", "95% CI", "reward", "turns", "llm()", "tokens"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for name, sub in (
        ("expert (upper bound)", "expert"),
        ("direct (truncated)", "direct"),
        ("rlm untrained", "rlm-untrained"),
        ("rlm SFT+GRPO", "rlm-trained"),
    ):
        table.add_row(*_row(name, evals / sub / "summary.json"))
    console.print(table)
    console.print(f"report: {out / 'report' / 'report.html'}")
    console.print(f"total {time.perf_counter() - started:.0f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("quickstart", help="the embedded default job (CPU, offline, ~10 min)")
    parser.add_argument("--out", default="runs/quickstart", help="run directory")
    parser.add_argument("--config", default=str(RECIPE), help="training recipe")
    parser.add_argument("--model", default="tiny-smol", help="policy model (offline name or path)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heldout", type=int, default=21)
    parser.add_argument("--lengths", nargs="+", default=["8K", "32K", "128K"], help="held-out lengths")
    parser.add_argument("--sft-tasks", type=int, default=32, help="expert transcripts for SFT")
    parser.add_argument("--sft-epochs", type=float, default=8.0)
    parser.add_argument("--grpo-steps", type=int, default=8)
    parser.set_defaults(func=run)
