"""`fathom quickstart`: the embedded default job, on a CPU, with no hub and no key.

Every stage is the real command, run in this process on a small scale:

1. `fathom data build` — two small held-out splits at 8K, 32K and 128K tokens (4x–64x the tiny model's
   window): ``heldout.jsonl`` (the families training uses) and ``heldout_unseen.jsonl`` (families no training
   data ever use, `fathom.tasks.UNSEEN_FAMILIES`: the headline);
2. `fathom eval` on both splits of the scripted **teacher** (it knows only what it printed; the SFT data
   source), the model answering **directly** from the document truncated to its window, and the same untrained
   model **in the scaffold** (`rlm`);
3. `fathom sft` on scripted transcripts, then a few steps of `fathom grpo` with the environment in the loop;
4. `fathom eval` of the trained model in the scaffold on both splits, and `fathom report` (PNG plots + HTML).

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
    splits = {"seen": data / "heldout.jsonl", "unseen": data / "heldout_unseen.jsonl"}
    _stage(console, "1/6 data", [
        "data", "build", "--out", str(data), "--seed", str(args.seed), "--train", "0", "--eval", "0",
        "--heldout", str(args.heldout), "--heldout-lengths", *args.lengths, "--difficulties", "medium",
        "--heldout-unseen", str(args.heldout_unseen), "--heldout-unseen-lengths", *args.lengths,
    ])  # fmt: skip

    def evaluate(step: str, name: str, policy: list[str]) -> None:
        for split, tasks in splits.items():
            out_dir = evals / (name if split == "seen" else f"{name}-unseen")
            _stage(console, f"{step} ({split} families)", [
                "eval", *policy, "--out", str(out_dir), "--tasks", str(tasks), "--overwrite",
            ])  # fmt: skip

    evaluate("2/6 teacher (scripted, grounded)", "teacher", ["--policy", "teacher"])
    evaluate("3/6 baseline: direct on a truncated document", "direct", [
        "--policy", "direct", "--model", args.model, "--label", "direct (untrained)",
    ])  # fmt: skip
    evaluate("3/6 baseline: untrained model in the scaffold", "rlm-untrained", [
        "--policy", "rlm", "--model", args.model, "--label", "rlm (untrained)",
    ])  # fmt: skip
    sft_dir, grpo_dir = out / "sft", out / "grpo"
    _stage(console, "4/6 SFT on scripted transcripts", [
        "sft", "--config", args.config, f"--run.run_dir={sft_dir}", f"--model.name={args.model}",
        "--model.lora=false", f"--sft.num_tasks={args.sft_tasks}", f"--sft.epochs={args.sft_epochs}",
    ])  # fmt: skip
    _stage(console, "5/6 GRPO with the environment in the loop", [
        "grpo", "--config", args.config, f"--run.run_dir={grpo_dir}", f"--model.name={args.model}",
        f"--model.init_from={sft_dir / 'final' / 'model'}", f"--grpo.max_steps={args.grpo_steps}",
    ])  # fmt: skip
    trained = grpo_dir / "final" / "merged"
    evaluate("6/6 trained model in the scaffold", "rlm-trained", [
        "--policy", "rlm", "--model", str(trained), "--label", "rlm (SFT+GRPO)",
    ])  # fmt: skip
    # One report over the training run and every evaluation: the report follows a link to the evals.
    link = grpo_dir / "evals"
    if not link.exists():
        link.symlink_to(evals, target_is_directory=True)
    _stage(console, "report", ["report", str(grpo_dir), "--out", str(out / "report")])

    table = Table(title=f"held-out tasks at {', '.join(args.lengths)} tokens ({args.model})")
    for col in ("policy", "families", "n", "accuracy", "95% CI", "reward", "turns", "llm()", "tokens"):
        table.add_column(col, justify="left" if col in ("policy", "families") else "right")
    for name, sub in (
        ("teacher (scripted)", "teacher"),
        ("direct (truncated)", "direct"),
        ("rlm untrained", "rlm-untrained"),
        ("rlm SFT+GRPO", "rlm-trained"),
    ):
        for split in splits:
            row = _row(name, evals / (sub if split == "seen" else f"{sub}-unseen") / "summary.json")
            table.add_row(row[0], split, *row[1:])
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
    parser.add_argument("--heldout", type=int, default=21, help="held-out tasks of the training families")
    parser.add_argument(
        "--heldout-unseen", type=int, default=14, help="held-out tasks of the unseen families"
    )
    parser.add_argument("--lengths", nargs="+", default=["8K", "32K", "128K"], help="held-out lengths")
    parser.add_argument("--sft-tasks", type=int, default=8, help="teacher transcripts for SFT")
    parser.add_argument("--sft-epochs", type=float, default=1.0)
    parser.add_argument("--grpo-steps", type=int, default=8)
    parser.set_defaults(func=run)
