"""One line per GRPO step from a run's metrics.jsonl: what `proof.sh wait` prints while a run trains.

python scripts/gpu/grpo_progress.py RUN/metrics.jsonl [NAME] [--last N]
"""

from __future__ import annotations

import argparse
import json

FIELDS = (  # (metrics.jsonl key, column, format)
    ("reward", "reward", "{:.3f}"),
    ("accuracy", "acc", "{:.3f}"),
    ("dynamic/zero_std_sampled", "zero-std sampled", "{:.2f}"),
    ("dynamic/zero_std_kept", "kept", "{:.2f}"),
    ("entropy", "entropy", "{:.3f}"),
    ("kl", "kl", "{:.4f}"),
    ("clip_ratio/region_mean", "clip", "{:.4f}"),
    ("subcalls/rows", "sub rows", "{:.0f}"),
    ("time/step_s", "step s", "{:.1f}"),
    ("curriculum/tier", "tier", "{:.0f}"),
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("metrics")
    parser.add_argument("name", nargs="?", default="")
    parser.add_argument("--last", type=int, default=6)
    args = parser.parse_args()
    steps: dict[int, dict] = {}
    with open(args.metrics, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                steps.setdefault(int(record.get("step", 0)), {}).update(record)
    print(f"{args.name}: {len(steps)} steps logged | " + " | ".join(c for _, c, _ in FIELDS))
    for step in sorted(steps)[-args.last :]:
        r = steps[step]
        cells = [fmt.format(r[k]) if isinstance(r.get(k), (int, float)) else "-" for k, _, fmt in FIELDS]
        print(f"  step {step}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
