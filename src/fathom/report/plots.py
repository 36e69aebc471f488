"""PNG plots of a run: training curves from ``metrics.jsonl`` and eval comparisons across policies.

Training figures draw whatever keys were logged and skip the rest (a figure with nothing to show is not
written). Each series accepts a few spellings (ours, TRL's), see `ALIASES`; reward components are the keys
under ``reward/`` or ``rewards/``; GRPO's exploration figures (zero-std fraction, clip fraction, training
accuracy by tier and family) take their series from `fathom.report.exploration`; anything numeric no figure claims lands in ``other_metrics.png``. Noisy
series get a thin raw line plus an exponential moving average.

Eval figures: accuracy vs document length per policy (95% Wilson intervals, the context window marked),
accuracy per family, and cost / sub-calls vs length.

Figures are built on `matplotlib.figure.Figure` with the Agg canvas: no pyplot, no global state, no
display needed. This module draws only; reading runs is `fathom.report.runs`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from fathom.eval.stats import bucket_sort_key, groups
from fathom.report import exploration
from fathom.report.runs import STEP_KEYS, EvalResult
from fathom.reward import COMPONENTS

Metrics = Sequence[dict[str, float]]

# series name -> accepted log keys, first found wins
ALIASES: dict[str, tuple[str, ...]] = {
    "reward": ("reward", "reward/total", "train/reward"),
    "accuracy": ("accuracy", "train/accuracy", "reward/accuracy"),
    "eval_accuracy": ("eval/accuracy",),
    "kl": ("kl", "train/kl", "objective/kl"),
    "entropy": ("entropy", "train/entropy"),
    "grad_norm": ("grad_norm", "train/grad_norm"),
    "completion_length": ("completion_length", "completions/mean_length", "train/completion_length"),
    "turns": ("turns", "behaviour/turns", "train/turns"),
    "llm_calls": ("llm_calls", "behaviour/subcalls", "sub_calls", "train/llm_calls"),
    "tier": ("tier", "recipe/tier", "curriculum/tier"),
    "penalty_weight": (
        "penalty_weight",
        "recipe/penalty_weight",
        "curriculum/penalty_weight",
        "token_weight",
    ),
    "generate_s": ("time/generate_s",),
    "env_s": ("time/env_s",),
    "optimise_s": ("time/optimise_s",),
}
TITLES = {
    "reward": "reward",
    "accuracy": "accuracy",
    "eval_accuracy": "eval accuracy",
    "kl": "KL to reference",
    "entropy": "entropy",
    "grad_norm": "grad norm",
    "completion_length": "completion length (tokens)",
    "turns": "turns per episode",
    "llm_calls": "sub-calls per episode",
    "tier": "curriculum tier",
    "penalty_weight": "token penalty weight",
    "generate_s": "generation",
    "env_s": "environment",
    "optimise_s": "optimisation",
}
DPI = 110


def _key(metrics: Metrics, name: str) -> str | None:
    present = {k for m in metrics for k in m}
    return next((k for k in ALIASES.get(name, (name,)) if k in present), None)


def _xy(metrics: Metrics, key: str) -> tuple[list[float], list[float]]:
    pairs = [(m["step"], m[key]) for m in metrics if key in m]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def ema(values: Sequence[float], span: int) -> list[float]:
    alpha, out, acc = 2 / (span + 1), [], None
    for v in values:
        acc = v if acc is None else alpha * v + (1 - alpha) * acc
        out.append(acc)
    return out


def _line(ax: Axes, xs: list[float], ys: list[float], label: str | None, color: str | None = None) -> None:
    if len(xs) >= 12:  # noisy: faint raw values, smoothed line on top
        raw = ax.plot(xs, ys, alpha=0.25, linewidth=0.8, color=color)[0]
        ax.plot(xs, ema(ys, max(3, len(xs) // 15)), label=label, linewidth=1.8, color=raw.get_color())
    else:
        ax.plot(xs, ys, marker="o", markersize=3, label=label, color=color)


def _decorate(ax: Axes, title: str, drawn: bool) -> None:
    ax.ticklabel_format(axis="y", useOffset=False)  # "10.79", not "+1.078987e1" above the axis
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    if not drawn:
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")


def _panel(ax: Axes, metrics: Metrics, names: Sequence[str], title: str) -> bool:
    """Draw the named series that exist on one axis; say 'not logged' when none does."""
    drawn = False
    for name in names:
        key = _key(metrics, name)
        if key is None:
            continue
        xs, ys = _xy(metrics, key)
        _line(ax, xs, ys, TITLES.get(name, key) if len(names) > 1 else None)
        drawn = True
    if drawn and len(names) > 1:
        ax.legend(fontsize=7)
    _decorate(ax, title, drawn)
    return drawn


def _curriculum(ax: Axes, metrics: Metrics) -> bool:
    """Tier as steps on the left axis, penalty weight on the right."""
    tier, weight = _key(metrics, "tier"), _key(metrics, "penalty_weight")
    if tier:
        xs, ys = _xy(metrics, tier)
        ax.step(xs, ys, where="post", color="tab:purple")
        ax.set_ylabel("tier", color="tab:purple", fontsize=8)
    if weight:
        other = ax.twinx() if tier else ax
        xs, ys = _xy(metrics, weight)
        other.plot(xs, ys, color="tab:orange")
        other.set_ylabel("penalty weight", color="tab:orange", fontsize=8)
        other.tick_params(labelsize=8)
    _decorate(ax, "curriculum tier / penalty weight", bool(tier or weight))
    return bool(tier or weight)


def components(metrics: Metrics) -> list[str]:
    keys = sorted({k for m in metrics for k in m})
    claimed = {a for aliases in ALIASES.values() for a in aliases}
    found = [
        k
        for k in keys
        if k.startswith(("reward/", "rewards/")) and not k.endswith(("/std", "/total")) and k not in claimed
    ]
    # The reward's own component order first (format, correctness, token_budget, recursion), then the rest.
    order = {name: i for i, name in enumerate(COMPONENTS)}
    return sorted(found, key=lambda k: (next((order[c] for c in order if c in k), len(order)), k))


def _grid(n: int, cols: int = 3) -> tuple[int, int]:
    cols = min(cols, n)
    return math.ceil(n / cols), cols


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return path


def _single(
    out: Path, name: str, metrics: Metrics, series: Sequence[str], title: str, together: bool = False
) -> Path | None:
    """One figure: the series side by side, or `together` on one axis; None when none was logged."""
    present = [s for s in series if _key(metrics, s)]
    if not present:
        return None
    if together:
        fig = Figure(figsize=(6.5, 3.8), layout="constrained")
        _panel(fig.add_subplot(1, 1, 1), metrics, present, title)
        return _save(fig, out / name)
    fig = Figure(figsize=(5.5 * len(present), 3.6), layout="constrained")
    for i, s in enumerate(present):
        _panel(fig.add_subplot(1, len(present), i + 1), metrics, [s], TITLES[s])
    fig.suptitle(title, fontsize=11)
    return _save(fig, out / name)


def training_plots(metrics: Metrics, out: Path) -> list[Path]:
    """Every training figure the logged keys allow, written into `out`; returns the paths written."""
    if not metrics:
        return []
    written = [
        summary_plot(metrics, out / "summary.png"),
        _single(out, "reward.png", metrics, ["reward"], "mean episode reward"),
        _single(out, "accuracy.png", metrics, ["accuracy", "eval_accuracy"], "accuracy", together=True),
        _single(out, "kl_entropy.png", metrics, ["kl", "entropy"], "KL and entropy"),
        _single(out, "grad_norm.png", metrics, ["grad_norm"], "gradient norm"),
        _single(out, "completion_length.png", metrics, ["completion_length"], "completion length"),
        _single(out, "turns_subcalls.png", metrics, ["turns", "llm_calls"], "behaviour per episode"),
        _single(
            out, "step_time.png", metrics, ["generate_s", "env_s", "optimise_s"], "seconds per step", True
        ),
    ]
    comps = components(metrics)
    if comps:
        rows, cols = _grid(len(comps))
        fig = Figure(figsize=(4.6 * cols, 3.2 * rows), layout="constrained")
        for i, key in enumerate(comps):
            _panel(fig.add_subplot(rows, cols, i + 1), metrics, [key], key)
        fig.suptitle("reward components", fontsize=11)
        written.append(_save(fig, out / "reward_components.png"))
    if _key(metrics, "tier") or _key(metrics, "penalty_weight"):
        fig = Figure(figsize=(6.5, 3.6), layout="constrained")
        _curriculum(fig.add_subplot(1, 1, 1), metrics)
        written.append(_save(fig, out / "curriculum.png"))
    written += exploration_plots(metrics, out)
    written.append(_other(metrics, out / "other_metrics.png"))
    return [p for p in written if p is not None]


def exploration_plots(metrics: Metrics, out: Path) -> list[Path]:
    """GRPO's exploration figures (`fathom.report.exploration`): every series of a figure on one axis."""
    written = []
    for stem, (title, series) in exploration.exploration_series(metrics).items():
        fig = Figure(figsize=(6.5, 3.8), layout="constrained")
        ax = fig.add_subplot(1, 1, 1)
        for label, (xs, ys) in series.items():
            _line(ax, xs, ys, label)
        ax.legend(fontsize=7)
        _decorate(ax, title, True)
        written.append(_save(fig, out / f"{stem}.png"))
    return written


def summary_plot(metrics: Metrics, path: Path) -> Path:
    """The 8-panel overview: reward, components, accuracy, KL+entropy, grad norm, length, behaviour,
    curriculum. Panels with nothing logged say so."""
    fig = Figure(figsize=(17, 7.5), layout="constrained")
    axes = [fig.add_subplot(2, 4, i + 1) for i in range(8)]
    _panel(axes[0], metrics, ["reward"], "reward")
    comps = components(metrics)
    # the composed reward's own terms when they were logged; extra shaping terms have their own figure
    main = [k for k in comps if k.split("/")[-1] in COMPONENTS] or comps
    _panel(axes[1], metrics, main, "reward components")
    _panel(axes[2], metrics, ["accuracy", "eval_accuracy"], "accuracy")
    _panel(axes[3], metrics, ["kl", "entropy"], "KL / entropy")
    _panel(axes[4], metrics, ["grad_norm"], "grad norm")
    _panel(axes[5], metrics, ["completion_length"], "completion length")
    _panel(axes[6], metrics, ["turns", "llm_calls"], "turns / sub-calls")
    _curriculum(axes[7], metrics)
    fig.suptitle("training summary", fontsize=13)
    return _save(fig, path)


OTHER_FIRST = ("eval/", "behaviour/", "time/", "throughput/", "recipe/", "curriculum/")


def _other(metrics: Metrics, path: Path, limit: int = 36) -> Path | None:
    """Every numeric key no other figure shows (eval, behaviour and timing first), up to `limit`."""
    claimed = {a for aliases in ALIASES.values() for a in aliases} | set(components(metrics)) | set(STEP_KEYS)
    claimed |= exploration.claimed(metrics)
    rank = {prefix: i for i, prefix in enumerate(OTHER_FIRST)}

    def order(key: str) -> tuple[int, str]:
        return next((r for p, r in rank.items() if key.startswith(p)), len(rank)), key

    rest = sorted({k for m in metrics for k in m} - claimed - {"time"}, key=order)[:limit]
    if not rest:
        return None
    rows, cols = _grid(len(rest), 4)
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows), layout="constrained")
    for i, key in enumerate(rest):
        _panel(fig.add_subplot(rows, cols, i + 1), metrics, [key], key)
    fig.suptitle("other logged metrics", fontsize=11)
    return _save(fig, path)


# ---- eval -------------------------------------------------------------------------------------------
def _buckets(evals: Sequence[EvalResult]) -> list[str]:
    return sorted({b for e in evals for b in groups(e.groups, "length")}, key=bucket_sort_key)


def _length_axis(ax: Axes, buckets: list[str], evals: Sequence[EvalResult]) -> None:
    ax.set_xscale("log", base=2)
    ticks = [bucket_sort_key(b) for b in buckets]
    contexts = {e.context_tokens for e in evals if e.context_tokens}
    if len(contexts) == 1:  # one window for every model: say how many windows each length is
        (ctx,) = contexts
        labels = [f"{b}\n{t / ctx:g}× ctx" for b, t in zip(buckets, ticks, strict=True)]
    else:
        labels = buckets
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("document length (tokens)", fontsize=9)
    ax.grid(alpha=0.3)


def accuracy_vs_length(evals: Sequence[EvalResult], path: Path) -> Path:
    fig = Figure(figsize=(8, 4.6), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    buckets = _buckets(evals)
    for i, e in enumerate(evals):
        g = groups(e.groups, "length")
        names = [b for b in buckets if b in g]
        shift = 2 ** ((i - (len(evals) - 1) / 2) * 0.06)  # spread overlapping error bars apart
        xs = [bucket_sort_key(b) * shift for b in names]
        acc = [g[b]["accuracy"] for b in names]
        err = [
            [a - g[b]["ci_low"] for a, b in zip(acc, names, strict=True)],
            [g[b]["ci_high"] - a for a, b in zip(acc, names, strict=True)],
        ]
        ax.errorbar(xs, acc, yerr=err, marker="o", capsize=3, label=e.label)
    for ctx in sorted({e.context_tokens for e in evals if e.context_tokens}):
        ax.axvline(ctx, linestyle=":", color="grey")
        ax.text(ctx, 1.02, f" context {ctx:,}", fontsize=7, color="grey", rotation=90, va="bottom")
    _length_axis(ax, buckets, evals)
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("accuracy (95% Wilson CI)", fontsize=9)
    ax.set_title("accuracy vs document length", fontsize=11)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def accuracy_by_family(evals: Sequence[EvalResult], path: Path) -> Path:
    families = sorted({f for e in evals for f in groups(e.groups, "family")})
    fig = Figure(figsize=(max(7, 1.3 * len(families) + 2), 4.4), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(evals))
    for i, e in enumerate(evals):
        g = groups(e.groups, "family")
        xs = [j + (i - (len(evals) - 1) / 2) * width for j, f in enumerate(families) if f in g]
        acc = [g[f]["accuracy"] for f in families if f in g]
        low = [g[f]["accuracy"] - g[f]["ci_low"] for f in families if f in g]
        high = [g[f]["ci_high"] - g[f]["accuracy"] for f in families if f in g]
        ax.bar(xs, acc, width, yerr=[low, high], capsize=2, label=e.label, error_kw={"linewidth": 0.8})
        for x, a in zip(xs, acc, strict=True):  # a 0% bar is invisible without its number
            ax.text(x, a + 0.01, f"{a:.0%}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(families)), families, fontsize=9)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("accuracy (95% Wilson CI)", fontsize=9)
    ax.set_title("accuracy per task family", fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def cost_vs_length(evals: Sequence[EvalResult], path: Path) -> Path:
    fig = Figure(figsize=(12, 4.2), layout="constrained")
    buckets = _buckets(evals)
    for k, (key, title) in enumerate(
        (
            ("cost_tokens", "tokens read + written per task (all models)"),
            ("llm_calls", "llm() sub-calls per task"),
        )
    ):
        ax = fig.add_subplot(1, 2, k + 1)
        for e in evals:
            g = groups(e.groups, "length")
            names = [b for b in buckets if b in g and key in g[b]]
            ax.plot(
                [bucket_sort_key(b) for b in names], [g[b][key] for b in names], marker="o", label=e.label
            )
        _length_axis(ax, buckets, evals)
        if key == "cost_tokens":
            ax.set_yscale("log")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    return _save(fig, path)


def eval_plots(evals: Sequence[EvalResult], out: Path) -> list[Path]:
    if not evals:
        return []
    return [
        accuracy_vs_length(evals, out / "accuracy_vs_length.png"),
        accuracy_by_family(evals, out / "accuracy_by_family.png"),
        cost_vs_length(evals, out / "cost_vs_length.png"),
    ]


def all_plots(metrics: Metrics, evals: Sequence[EvalResult], out: Path) -> dict[str, Any]:
    """Write every plot into `out`; returns {"training": [paths], "eval": [paths]}."""
    out.mkdir(parents=True, exist_ok=True)
    return {"training": training_plots(metrics, out), "eval": eval_plots(evals, out)}
