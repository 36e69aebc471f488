"""Evaluation statistics: Wilson confidence intervals and the grouped summary of an eval's rows.

An eval row is one JSON object per task (see `fathom.eval.runner`); `summarize(rows)` groups them into
``all``, ``family/<name>`` and ``length/<bucket>`` and reports for each: n, correct, accuracy with its 95%
Wilson interval, and the mean reward, policy tokens, cost, sub-calls, turns and wall time.

`paired(a, b)` compares two policies on the same tasks (exact McNemar test on the tasks where they differ).

Length buckets are the smallest power of two (in tokens) at or above a task's nominal length, named like
task tiers ("8K", "128K"): built datasets land exactly on their tier, hand-written files on the tier above.

This module is pure: it reads rows and returns numbers, it never runs a policy or touches files.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fathom.tasks.haystack import format_length

Z95 = 1.959963984540054  # two-sided 95% normal quantile
MEAN_FIELDS = ("reward", "score", "tokens", "cost_tokens", "llm_calls", "turns", "wall_s")


def wilson(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for `correct` successes in `n` trials; (0, 1) when n == 0.

    Chosen over the normal (Wald) interval because eval groups are small and accuracies sit near 0 or 1,
    where Wald collapses to a zero-width interval."""
    if n < 0 or not 0 <= correct <= n:
        raise ValueError(f"need 0 <= correct <= n, got correct={correct}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # The interval always holds p (exactly 0 or 1 at the ends); clamp floating-point dust to keep it so.
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def length_bucket(length_tokens: int) -> str:
    """'8K' for 5,000 or 8,192 tokens; '128K' for 100,000 (the power-of-two tier at or above); a whole
    number of K is its own bucket ('400K' for 409,600: 50x an 8K window, not '512K')."""
    if length_tokens <= 1:
        return format_length(1)
    if length_tokens % 1024 == 0:
        return format_length(int(length_tokens))
    return format_length(1 << (int(length_tokens) - 1).bit_length())


def bucket_sort_key(name: str) -> int:
    """Numeric order for bucket names made by `length_bucket`."""
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(name[:-1]) * units[name[-1]] if name[-1] in units else int(name)


def group_stats(rows: list[Mapping[str, Any]]) -> dict[str, float]:
    """n, correct, accuracy, its Wilson interval, and the mean of every `MEAN_FIELDS` key present."""
    n = len(rows)
    correct = sum(bool(r["correct"]) for r in rows)
    low, high = wilson(correct, n)
    out: dict[str, float] = {
        "n": n,
        "correct": correct,
        "accuracy": correct / n if n else 0.0,
        "ci_low": low,
        "ci_high": high,
    }
    for key in MEAN_FIELDS:
        values = [float(r[key]) for r in rows if r.get(key) is not None]
        if values:
            out[key] = sum(values) / len(values)
    return out


def summarize(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Group stats keyed ``all``, ``family/<name>`` (sorted) and ``length/<bucket>`` (shortest first)."""
    rows = list(rows)
    families: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    lengths: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        families[row["family"]].append(row)
        lengths[length_bucket(row["length_tokens"])].append(row)
    out = {"all": group_stats(rows)}
    for name in sorted(families):
        out[f"family/{name}"] = group_stats(families[name])
    for name in sorted(lengths, key=bucket_sort_key):
        out[f"length/{name}"] = group_stats(lengths[name])
    return out


def groups(summary: Mapping[str, Any], kind: str) -> dict[str, Mapping[str, float]]:
    """The ``family`` or ``length`` groups of a summary, keyed by bare name, in summary order."""
    prefix = f"{kind}/"
    return {k[len(prefix) :]: v for k, v in summary.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class Paired:
    """Two policies on the same tasks: how many each got right where the other did not, and the exact
    two-sided McNemar p-value of that split (a binomial test on the discordant tasks, at p = 1/2)."""

    n: int  # tasks both were evaluated on
    only_a: int  # right by A, wrong by B
    only_b: int
    p_value: float


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value for `only_a` vs `only_b` discordant pairs (1.0 when there are none)."""
    if only_a < 0 or only_b < 0:
        raise ValueError(f"discordant counts must be >= 0, got {only_a}, {only_b}")
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]]) -> Paired:
    """McNemar over the tasks (by ``id``) that both row sets hold; a task missing from either is refused,
    since a comparison over different task sets is not paired."""
    right_a = {r["id"]: bool(r["correct"]) for r in a}
    right_b = {r["id"]: bool(r["correct"]) for r in b}
    if set(right_a) != set(right_b):
        missing = sorted(set(right_a) ^ set(right_b))
        raise ValueError(f"paired comparison needs the same tasks; {len(missing)} differ, e.g. {missing[:3]}")
    only_a = sum(right_a[i] and not right_b[i] for i in right_a)
    only_b = sum(right_b[i] and not right_a[i] for i in right_a)
    return Paired(len(right_a), only_a, only_b, mcnemar_exact(only_a, only_b))
