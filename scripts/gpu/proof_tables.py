"""Markdown tables of the GPU proof's evaluations (what bench/RESULTS.md and the README show).

python scripts/gpu/proof_tables.py DIR     # DIR: the unpacked keep/ folder of proof.sh's archives
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROWS = (
    ("expert (scripted upper bound)", "expert"),
    ("direct answer, document truncated to 8K (untrained)", "direct"),
    ("RLM scaffold, untrained", "rlm-untrained"),
    ("RLM scaffold, after SFT", "rlm-sft"),
    ("RLM scaffold, SFT + GRPO", "rlm-grpo"),
)


def cell(group: dict) -> str:
    return f"{group['accuracy']:.0%} [{group['ci_low']:.0%}, {group['ci_high']:.0%}]"


def main(folder: Path) -> None:
    summaries = {}
    for label, name in ROWS:
        path = folder / f"eval_{name}_summary.json"
        if path.exists():
            summaries[label] = json.loads(path.read_text())["groups"]
    first = next(iter(summaries.values()))
    for prefix in ("family/", "length/"):
        keys = [k for k in first if k.startswith(prefix)]
        print(
            "\n| policy (accuracy, 95% Wilson CI) | all | "
            + " | ".join(k[len(prefix) :] for k in keys)
            + " |"
        )
        print("|---" * (len(keys) + 2) + "|")
        for label, groups in summaries.items():
            print(f"| {label} | {cell(groups['all'])} | " + " | ".join(cell(groups[k]) for k in keys) + " |")
    print(
        "\n| policy | n | reward | model tokens / episode | tokens read+written (cost) | turns | llm() calls |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, groups in summaries.items():
        a = groups["all"]
        print(
            f"| {label} | {a['n']} | {a.get('reward', 0):.2f} | {a.get('tokens', 0):,.0f} | "
            f"{a.get('cost_tokens', 0):,.0f} | {a.get('turns', 0):.1f} | {a.get('llm_calls', 0):.2f} |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
