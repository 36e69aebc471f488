"""A self-contained HTML report: eval tables and every plot, images embedded as base64 (one file to share).

Sections: the eval comparison (one row per policy: accuracy with its 95% Wilson interval, reward, tokens,
cost, sub-calls, turns), accuracy per document length and per family (policies side by side), the eval
plots, then training: the last logged value of each series and the training plots; the run's config file
when there is one. Sections with no data are left out, so a directory of eval results alone works.

This module only formats; the numbers come from `fathom.report.runs`, the images from `fathom.report.plots`.
"""

from __future__ import annotations

import base64
import html
import time
from collections.abc import Sequence
from pathlib import Path

from fathom.eval.stats import bucket_sort_key, groups
from fathom.report.runs import EvalResult

CONFIG_FILES = ("config.json", "config.toml", "resolved_config.json", "resolved_config.toml")
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 14px; }
th, td { border: 1px solid #ccc; padding: 4px 9px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption, .note { color: #666; font-size: 13px; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 12px; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _acc(stats: dict[str, float] | None) -> str:
    if not stats:
        return "–"
    return f"{stats['accuracy']:.1%} [{stats['ci_low']:.0%}–{stats['ci_high']:.0%}] n={stats['n']}"


def figure(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (
        f'<figure id="{_e(path.stem)}"><img alt="{_e(path.name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(path.name)}</figcaption></figure>"
    )


def eval_section(evals: Sequence[EvalResult]) -> str:
    overall = []
    for e in evals:
        s = e.groups["all"]
        overall.append(
            [
                e.label,
                e.config.get("model") or "–",
                f"{e.context_tokens:,}" if e.context_tokens else "–",
                _acc(s),
                f"{s.get('reward', 0):.3f}",
                f"{s.get('tokens', 0):,.0f}",
                f"{s.get('cost_tokens', 0):,.0f}",
                f"{s.get('llm_calls', 0):.2f}",
                f"{s.get('turns', 0):.2f}",
                f"{s.get('wall_s', 0):.2f}",
            ]
        )
    header = ["policy", "model", "context", "accuracy [95% CI]", "reward", "policy tokens", "cost tokens"]
    parts = [
        "<h2>Evaluation</h2>",
        _table([*header, "llm() calls", "turns", "s/task"], overall),
        '<p class="note">Cost tokens: every token any model read or wrote for a task (the policy\'s prompt '
        "at each turn, its output, and the sub-LM's input and output). s/task: batch wall time per task.</p>",
    ]
    for kind, title, key in (
        ("length", "Accuracy by document length", bucket_sort_key),
        ("family", "Accuracy by task family", str),
    ):
        names = sorted({n for e in evals for n in groups(e.groups, kind)}, key=key)  # type: ignore[arg-type]
        rows = [[n, *(_acc(groups(e.groups, kind).get(n)) for e in evals)] for n in names]
        parts += [f"<h3>{title}</h3>", _table([kind, *(e.label for e in evals)], rows)]
    return "\n".join(parts)


def training_section(metrics: Sequence[dict[str, float]]) -> str:
    last: dict[str, tuple[float, float]] = {}
    for m in metrics:
        for k, v in m.items():
            last[k] = (m["step"], v)
    rows = [[k, f"{v:.4g}", f"{step:g}"] for k, (step, v) in sorted(last.items()) if k != "step"]
    return (
        f"<h2>Training</h2><p>{len(metrics)} logged steps, last step {metrics[-1]['step']:g}.</p>"
        + _table(["metric", "last value", "at step"], rows)
    )


def render(
    run_dir: Path,
    metrics: Sequence[dict[str, float]],
    evals: Sequence[EvalResult],
    plots: dict[str, list[Path]],
) -> str:
    """The whole page as a string."""
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>FATHOM report: {_e(run_dir.name)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>FATHOM report: {_e(run_dir.name)}</h1>",
        f"<p class='note'>{_e(run_dir.resolve())} — generated {time.strftime('%Y-%m-%d %H:%M:%S')}</p>",
    ]
    if not metrics and not evals:
        parts.append("<p>No metrics.jsonl and no eval results were found in this directory.</p>")
    if evals:
        parts.append(eval_section(evals))
        parts += [figure(p) for p in plots.get("eval", [])]
    if metrics:
        parts.append(training_section(metrics))
        parts += [figure(p) for p in plots.get("training", [])]
    for name in CONFIG_FILES:
        if (run_dir / name).is_file():
            text = (run_dir / name).read_text(errors="replace")
            parts.append(f"<details><summary>{_e(name)}</summary><pre>{_e(text)}</pre></details>")
    parts.append("</body></html>")
    return "\n".join(parts)
