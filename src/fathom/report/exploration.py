"""The per-step series of GRPO's exploration figures, picked out of ``metrics.jsonl`` (data only).

Four figures, each drawn by `fathom.report.plots` from what `exploration_series` returns:

- ``zero_std``: the fraction of groups with zero reward std: TRL's ``frac_reward_zero_std`` (the batch it
  trained on) and, with dynamic sampling, ``dynamic/zero_std_sampled`` (before the selection) and
  ``dynamic/zero_std_kept`` (after);
- ``clip_ratio``: TRL's clipped-token fractions (``clip_ratio/region_mean``, ``/low_mean``, ``/high_mean``;
  ``cispo_clip_ratio`` for CISPO);
- ``train_accuracy_by_tier`` / ``train_accuracy_by_family``: ``accuracy/tier/<name>`` and
  ``accuracy/family/<name>``, one line each (a tier's line has points only on the steps it ran).

Entropy and KL (``kl_entropy``) and the reward components (``reward_components``) have their figures in
`plots`. This module draws nothing and reads no file.
"""

from __future__ import annotations

from collections.abc import Sequence

Metrics = Sequence[dict[str, float]]
Series = dict[str, tuple[list[float], list[float]]]  # label -> (steps, values)

# figure stem -> (title, ((key, label), ...)): fixed keys
KEYED: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "zero_std": (
        "groups with zero reward std",
        (
            ("frac_reward_zero_std", "trained batch (TRL)"),
            ("dynamic/zero_std_sampled", "sampled, before dynamic sampling"),
            ("dynamic/zero_std_kept", "kept, after dynamic sampling"),
        ),
    ),
    "clip_ratio": (
        "clipped token fraction",
        (
            ("clip_ratio/region_mean", "either side"),
            ("clip_ratio/low_mean", "low (ratio < 1 - epsilon)"),
            ("clip_ratio/high_mean", "high (ratio > 1 + epsilon_high)"),
            ("cispo_clip_ratio", "CISPO"),
        ),
    ),
}
# figure stem -> (title, key prefix): one line per key under the prefix, labelled by the rest of the key
PREFIXED: dict[str, tuple[str, str]] = {
    "train_accuracy_by_tier": ("training accuracy by curriculum tier", "accuracy/tier/"),
    "train_accuracy_by_family": ("training accuracy by task family", "accuracy/family/"),
}


def _xy(metrics: Metrics, key: str) -> tuple[list[float], list[float]]:
    pairs = [(m["step"], m[key]) for m in metrics if key in m]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def exploration_series(metrics: Metrics) -> dict[str, tuple[str, Series]]:
    """Figure stem -> (title, its series); a figure none of whose keys was logged is left out."""
    present = sorted({k for m in metrics for k in m})
    out: dict[str, tuple[str, Series]] = {}
    for stem, (title, keyed) in KEYED.items():
        series = {label: _xy(metrics, key) for key, label in keyed if key in present}
        if series:
            out[stem] = (title, series)
    for stem, (title, prefix) in PREFIXED.items():
        series = {k[len(prefix) :]: _xy(metrics, k) for k in present if k.startswith(prefix)}
        if series:
            out[stem] = (title, series)
    return out


def claimed(metrics: Metrics) -> set[str]:
    """The keys these figures show (so the catch-all figure does not repeat them)."""
    keys = {k for m in metrics for k in m}
    fixed = {key for _, keyed in KEYED.values() for key, _ in keyed}
    return (keys & fixed) | {k for k in keys for _, prefix in PREFIXED.values() if k.startswith(prefix)}
