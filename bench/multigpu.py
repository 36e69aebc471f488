"""Compare GRPO runs made with different process counts (issue #9): one GPU against DDP and FSDP on several.

    python bench/multigpu.py --ref single=/root/mg/single ddp=/root/mg/ddp fsdp=/root/mg/fsdp [--json out.json]

Each run dir holds the ``metrics.jsonl`` that ``fathom grpo`` writes on rank 0; its per-step values are global
(reduced over every rank's rollouts: tests/train/test_global_metrics.py). Printed:

- per run and step: loss, reward (TRL's, the shaped reward), accuracy, step time, sampled tokens/s (every
  rank's), rollout time of the slowest rank, and the tasks of the step when the traces are there;
- per run: the mean of reward, accuracy and loss over its steps with the standard error (std / sqrt(n));
  step time and tokens/s over steps 2.. (step 1 carries the warm-up), and their ratio to the reference;
- against the reference, over the steps both runs made: the difference of the means with its 2-SE band (SE
  of the difference of two independent means) and the mean per-step (paired) difference with its 2-SE band
  (the runs draw the same tasks at each step, so pairing removes the task-to-task spread). Curves "match
  within noise" when both differences sit inside their bands.

Same tasks: a step's tasks are a pure function of (seed, tier, step, slot) and the slot order of the global
batch does not depend on the process count; `--traces` reads every rank's ``traces*.jsonl`` and checks it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

KEYS = {
    "loss": "loss",
    "grad_norm": "grad_norm",
    "reward": "reward",
    "accuracy": "accuracy",
    "step_s": "time/step_s",
    "tok_s": "throughput/sampled_tokens_per_s",
    "rollout_max_s": "time/rollout_max_s",
    "generate_s": "time/generate_s",
}


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} does not exist")
    rows: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        if "loss" in r and "step" in r:
            rows[r["step"]] = r  # a resumed run rewrites steps after its checkpoint: keep the last
    return [rows[s] for s in sorted(rows)]


def step_tasks(run_dir: Path) -> dict[int, Counter]:
    """Task ids of each step's training rollouts, over every rank's trace file."""
    out: dict[int, Counter] = {}
    for path in sorted(run_dir.glob("traces*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for line in f:
                if '"kind": "train"' not in line[:200]:
                    continue
                try:
                    t = json.loads(line)
                except json.JSONDecodeError:
                    continue
                out.setdefault(t["step"], Counter())[t["task_id"]] += 1
    return out


def setup(run_dir: Path, world: Any) -> str:
    """What the run was: generation mode and batch geometry, from its resolved config."""
    import tomllib

    try:
        c = tomllib.loads((run_dir / "config.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return "no config.toml"
    g, r = c["grpo"], c["rollout"]
    per, acc = g["per_device_train_batch_size"], g["gradient_accumulation_steps"]
    w = world if isinstance(world, int) else 1
    return (
        f"{per} x {acc} x {w} = {per * acc * w} rollouts/step (groups of {g['num_generations']}), "
        f"generation {r['generation_mode']}, model {c['model']['name']} {c['model']['dtype']}, seed {c['run']['seed']}"
    )


def mean_se(values: list[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    if len(values) == 1:
        return values[0], math.nan
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def col(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[KEYS[key]]) for r in rows if r.get(KEYS[key]) is not None]


def sci(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def fmt(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def summarize(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    timed = rows[1:] if len(rows) > 1 else rows
    s: dict[str, Any] = {
        "name": name,
        "steps": len(rows),
        "world_size": rows[0].get("world_size", 1) if rows else None,
    }
    for key in ("reward", "accuracy", "loss", "grad_norm"):
        s[key], s[f"{key}_se"] = mean_se(col(rows, key))
    for key in ("step_s", "tok_s", "rollout_max_s", "generate_s"):
        s[key] = statistics.fmean(col(timed, key)) if col(timed, key) else math.nan
    s["first_step_s"] = col(rows, "step_s")[0] if rows else math.nan
    return s


def compare(ref: list[dict[str, Any]], other: list[dict[str, Any]], key: str) -> dict[str, float]:
    """Difference of means (other - ref) with its SE, over the steps both made; and the paired version."""
    a = {r["step"]: float(r[KEYS[key]]) for r in ref if r.get(KEYS[key]) is not None}
    b = {r["step"]: float(r[KEYS[key]]) for r in other if r.get(KEYS[key]) is not None}
    common = sorted(set(a) & set(b))
    if not common:
        return {"n": 0}
    xa, xb = [a[s] for s in common], [b[s] for s in common]
    ma, sa = mean_se(xa)
    mb, sb = mean_se(xb)
    diffs = [y - x for x, y in zip(xa, xb, strict=True)]
    md, sd = mean_se(diffs)
    return {"n": len(common), "diff": mb - ma, "diff_se": math.hypot(sa, sb), "paired": md, "paired_se": sd}


def within(d: dict[str, float]) -> str:
    if d.get("n", 0) < 2 or math.isnan(d.get("diff_se", math.nan)):
        return "too few steps to say"
    ok = abs(d["diff"]) <= 2 * d["diff_se"] and abs(d["paired"]) <= 2 * (d["paired_se"] or 0)
    return "within noise (|diff| <= 2 SE)" if ok else "OUTSIDE 2 SE"


def clean(x: Any) -> Any:
    """JSON-safe: NaN becomes None."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [clean(v) for v in x]
    return x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="NAME=RUN_DIR; the first one, or --ref, is the reference")
    ap.add_argument("--ref", default=None, help="the reference run's NAME (default: the first)")
    ap.add_argument("--traces", action="store_true", help="read traces*.jsonl to check the tasks per step")
    ap.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = ap.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {}
    dirs: dict[str, Path] = {}
    for spec in args.runs:
        name, _, path = spec.partition("=")
        if not path:
            ap.error(f"{spec!r}: want NAME=RUN_DIR")
        if not (Path(path) / "metrics.jsonl").exists():
            print(f"(skipping {name}: no {path}/metrics.jsonl)")
            continue
        dirs[name], runs[name] = Path(path), read_rows(Path(path))
    if not runs:
        print("no runs to compare")
        return 1
    ref = args.ref if args.ref in runs else next(iter(runs))

    tasks = {name: step_tasks(d) for name, d in dirs.items()} if args.traces else {}
    for name, rows in runs.items():
        world = rows[0].get("world_size", "?") if rows else "?"
        print(
            f"\n== {name} ({dirs[name]}): {len(rows)} steps, world size {world}; {setup(dirs[name], world)}"
        )
        print(
            f"{'step':>4} {'loss':>10} {'grad_norm':>9} {'reward':>7} {'acc':>6} {'step s':>8} {'tok/s':>8} "
            f"{'slowest rollout s':>17} {'tasks':>6}"
        )
        for r in rows:
            ts = tasks.get(name, {}).get(r["step"])
            print(
                f"{r['step']:>4} {sci(r.get('loss')):>10} {fmt(r.get('grad_norm'), 4):>9} {fmt(r.get('reward')):>7} "
                f"{fmt(r.get('accuracy')):>6} "
                f"{fmt(r.get('time/step_s'), 1):>8} {fmt(r.get('throughput/sampled_tokens_per_s'), 0):>8} "
                f"{fmt(r.get('time/rollout_max_s', r.get('time/rollout_s')), 1):>17} {sum(ts.values()) if ts else '-':>6}"
            )

    summaries = {name: summarize(name, rows) for name, rows in runs.items()}
    base = summaries[ref]
    print(f"\n== summary (reference: {ref}; means over steps +- SE; times and tokens/s over steps 2..)")
    print(
        f"{'run':<8} {'world':>5} {'steps':>5} {'reward':>15} {'accuracy':>15} {'loss':>21} {'step s':>8} "
        f"{'tok/s':>8} {'step s / ref':>12} {'tok/s / ref':>11}"
    )
    for name, s in summaries.items():
        print(
            f"{name:<8} {s['world_size'] or '?':>5} {s['steps']:>5} "
            f"{fmt(s['reward']):>7} +- {fmt(s['reward_se']):<5} {fmt(s['accuracy']):>7} +- {fmt(s['accuracy_se']):<5} "
            f"{sci(s['loss']):>10} +- {sci(s['loss_se']):<8} {fmt(s['step_s'], 1):>8} {fmt(s['tok_s'], 0):>8} "
            f"{fmt(s['step_s'] / base['step_s'], 2):>12} {fmt(s['tok_s'] / base['tok_s'], 2):>11}"
        )
    comparisons: dict[str, Any] = {}
    for name in runs:
        if name == ref:
            continue
        comparisons[name] = {}
        print(f"\n== {name} vs {ref}, over the steps both made")
        for key in ("reward", "accuracy", "loss", "grad_norm"):
            d = compare(runs[ref], runs[name], key)
            comparisons[name][key] = d
            if d["n"] == 0:
                print(f"  {key:<8} no common steps")
                continue
            print(
                f"  {key:<9} n={d['n']:<3} diff of means {sci(d['diff']):>9} (2 SE {sci(2 * d['diff_se'])}), "
                f"paired {sci(d['paired']):>9} (2 SE {sci(2 * d['paired_se'])}): {within(d)}"
            )
        if tasks:
            common = sorted(set(tasks.get(ref, {})) & set(tasks.get(name, {})))
            same = [s for s in common if tasks[ref][s] == tasks[name][s]]
            comparisons[name]["same_tasks_steps"] = [len(same), len(common)]
            print(f"  tasks    the same rollouts' tasks at {len(same)} of {len(common)} common steps")
    if args.json:
        out = {"reference": ref, "runs": summaries, "comparisons": comparisons}
        args.json.write_text(json.dumps(clean(out), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
