"""`fathom report RUN_DIR`: PNG plots and a self-contained HTML report of a training run, its evals, or both.

    fathom report runs/quickstart                  # -> runs/quickstart/report/{*.png,report.html}
    fathom report runs/quickstart --out /tmp/rep

Reads ``RUN_DIR/metrics.jsonl`` (when present) and every ``eval.jsonl`` under RUN_DIR. This module wires
the pieces together; see `fathom.report.runs`, `fathom.report.plots` and `fathom.report.html`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

METRICS_FILE = "metrics.jsonl"


def build_report(run_dir: Path, out: Path | None = None) -> tuple[Path, list[Path]]:
    """Write the plots and ``report.html`` into `out` (default RUN_DIR/report); returns (page, plots)."""
    from fathom.report.html import render
    from fathom.report.plots import all_plots
    from fathom.report.runs import find_evals, load_metrics

    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} is not a directory")
    out = out or run_dir / "report"
    metrics = load_metrics(run_dir / METRICS_FILE)
    evals = [e for e in find_evals(run_dir) if out not in e.directory.parents]
    plots = all_plots(metrics, evals, out)
    page = out / "report.html"
    page.write_text(render(run_dir, metrics, evals, plots), encoding="utf-8")
    return page, [*plots["eval"], *plots["training"]]


def run(args: argparse.Namespace) -> int:
    page, plots = build_report(args.run_dir, args.out)
    print(f"report: {page}")
    print(f"plots:  {', '.join(p.name for p in plots) or 'none (no metrics.jsonl, no eval results)'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="PNG plots and an HTML report of a run directory")
    p.add_argument("run_dir", type=Path, help="run directory (metrics.jsonl and/or eval results)")
    p.add_argument("--out", type=Path, help="output directory (default RUN_DIR/report)")
    p.set_defaults(func=run)
