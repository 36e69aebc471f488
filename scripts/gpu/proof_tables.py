"""Tables and bench/results/gpu_proof.json from the GPU proof's evaluations (what RESULTS.md and the README show).

    python scripts/gpu/proof_tables.py DIR [--json bench/results/gpu_proof.json] [--commands FILE] [--rows FILE]

DIR holds the unpacked keep/ folder of `scripts/gpu/proof.sh`'s archive: ``eval_<name>_summary.json`` and
``eval_<name>_eval.jsonl`` for the training families' split (``heldout``) and ``eval_<name>-unseen_*`` for the
unseen families' (``heldout_unseen``). Prints markdown: accuracy with 95% Wilson intervals per family and per
length, per-episode costs, and exact McNemar tests (SFT+GRPO vs SFT, trained vs masked sub-calls) on the same
tasks (and, where the trained models were also evaluated with the untrained model reading their llm() calls,
``eval_<name>-br_*``, those against their own reader's; and with a reader trained apart, ``-tr``); where the folder holds sampled episodes
(``eval_<name>[-unseen]_traces_sample.jsonl``), what went wrong inside them (`trace_stats.py`). With --json,
writes per policy and split n, correct, accuracy, ci_low and ci_high (and the groups), the McNemar results, the
issue's floors checked, those episode figures, and the commands (one per line of --commands). With --rows,
writes each policy's per-task rows (correct, answer, end reason, turns, calls), which the archive's own eval
files are too large to keep in the repository.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trace_stats import episode_stats  # this folder's module: run as `python scripts/gpu/proof_tables.py`

from fathom.eval.runner import read_rows
from fathom.eval.stats import paired

POLICIES = (  # (name in the archive, label)
    ("teacher", "teacher (scripted, grounded; its own reader)"),
    ("teacher-br", "teacher (scripted, grounded), its llm() calls read by the untrained model"),
    ("direct", "direct answer, document truncated to 8K (untrained)"),
    ("rlm-untrained", "RLM scaffold, untrained"),
    ("rlm-sft", "RLM scaffold, after SFT"),
    ("rlm-sft-rp", "RLM scaffold, after SFT, evaluated with a repetition penalty"),
    ("rlm-grpo-masked", "RLM scaffold, SFT + GRPO (sub-calls masked)"),
    ("rlm-grpo", "RLM scaffold, SFT + GRPO (sub-calls trained)"),
    ("rlm-grpo-b", "RLM scaffold, SFT + GRPO (sub-calls trained, second learning rate)"),
    ("rlm-sft-br", "RLM scaffold, after SFT, its llm() calls read by the untrained model"),
    ("rlm-grpo-br", "RLM scaffold, SFT + GRPO, its llm() calls read by the untrained model"),
    ("rlm-sft-tr", "RLM scaffold, after SFT, its llm() calls read by a reader trained apart"),
    ("rlm-grpo-tr", "RLM scaffold, SFT + GRPO, its llm() calls read by a reader trained apart"),
)
# with PROOF_EVAL_READER=both, each trained model is also evaluated with the untrained model as its reader
# ("-br"), and with a reader trained apart ("-tr"); the floors are checked for each such pair of evaluations
READERS = (("own", ""), ("untrained", "-br"), ("trained_apart", "-tr"))
SPLITS = (("heldout", ""), ("heldout_unseen", "-unseen"))
COMPARISONS = (
    ("rlm-grpo", "rlm-sft"),
    ("rlm-sft-rp", "rlm-sft"),
    ("rlm-grpo-masked", "rlm-sft"),
    ("rlm-grpo", "rlm-grpo-masked"),
    ("rlm-grpo-b", "rlm-sft"),
    ("rlm-grpo-b", "rlm-grpo"),
    ("rlm-sft-br", "rlm-sft"),
    ("rlm-sft-br", "teacher-br"),
    ("teacher-br", "teacher"),
    ("rlm-grpo-br", "rlm-grpo"),
    ("rlm-grpo-br", "rlm-sft-br"),
    ("rlm-sft-tr", "rlm-sft"),
    ("rlm-sft-tr", "rlm-sft-br"),
    ("rlm-grpo-tr", "rlm-sft-tr"),
    ("rlm-grpo-tr", "rlm-grpo"),
)


def cell(group: dict[str, Any]) -> str:
    return f"{group['accuracy']:.0%} [{group['ci_low']:.0%}, {group['ci_high']:.0%}]"


def load(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """{policy: {split: {"groups": ..., "rows": [...]}}} for what the folder holds."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for name, _ in POLICIES:
        for split, suffix in SPLITS:
            summary = folder / f"eval_{name}{suffix}_summary.json"
            if summary.exists():
                found.setdefault(name, {})[split] = {
                    "groups": json.loads(summary.read_text())["groups"],
                    "rows": read_rows(folder / f"eval_{name}{suffix}_eval.jsonl"),
                }
    return found


ROW_KEYS = ("id", "family", "length_tokens", "correct", "end_reason", "turns", "llm_calls", "tokens")


def write_rows(found: dict[str, dict[str, dict[str, Any]]], path: Path) -> None:
    """One line per policy, split and task, so that a later run's McNemar test can pair its tasks with these
    (the archive's eval files are not kept in the repository; these few fields are)."""
    with path.open("w") as f:
        for name, splits in found.items():
            for split, d in splits.items():
                for row in d["rows"]:
                    answer = row.get("answer")
                    kept = {k: row[k] for k in ROW_KEYS}
                    kept["answer"] = None if answer is None else str(answer)[:80]
                    f.write(json.dumps({"policy": name, "split": split, **kept}) + "\n")


def tables(found: dict[str, dict[str, dict[str, Any]]]) -> str:
    labels = dict(POLICIES)
    out: list[str] = []
    for split, _ in SPLITS:
        present = [(n, d[split]["groups"]) for n, d in found.items() if split in d]
        if not present:
            continue
        for prefix in ("family/", "length/"):
            keys = sorted(
                {k for _, g in present for k in g if k.startswith(prefix)}, key=list(present[0][1]).index
            )
            out.append(f"\n`{split}`, by {prefix[:-1]} (accuracy, 95% Wilson interval):\n")
            out.append("| policy | all | " + " | ".join(k[len(prefix) :] for k in keys) + " |")
            out.append("|---" * (len(keys) + 2) + "|")
            for name, g in present:
                cells = " | ".join(cell(g[k]) if k in g else "" for k in keys)
                out.append(f"| {labels[name]} | {cell(g['all'])} | {cells} |")
        out.append(f"\n`{split}`, per episode (means):\n")
        out.append("| policy | n | reward | model tokens | cost tokens | turns | llm() calls |")
        out.append("|---|---|---|---|---|---|---|")
        for name, g in present:
            a = g["all"]
            out.append(
                f"| {labels[name]} | {a['n']} | {a.get('reward', 0):.2f} | {a.get('tokens', 0):,.0f} | "
                f"{a.get('cost_tokens', 0):,.0f} | {a.get('turns', 0):.1f} | {a.get('llm_calls', 0):.2f} |"
            )
    return "\n".join(out)


def comparisons(found: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    results = []
    for a, b in COMPARISONS:
        for split, _ in SPLITS:
            if split in found.get(a, {}) and split in found.get(b, {}):
                p = paired(found[a][split]["rows"], found[b][split]["rows"])
                acc = {n: found[n][split]["groups"]["all"]["accuracy"] for n in (a, b)}
                results.append(
                    {"a": a, "b": b, "split": split, "n": p.n, "only_a": p.only_a, "only_b": p.only_b,
                     "points": round(100 * (acc[a] - acc[b]), 2), "p_value": p.p_value}
                )  # fmt: skip
    return results


def floors(
    found: dict[str, dict[str, dict[str, Any]]], tests: list[dict[str, Any]], reader: str = ""
) -> dict[str, Any]:
    """The issue's floors, each with the measured value and whether it is met (None: not measured).
    `reader`: "" for the trained models reading their own llm() calls, "-br" for the untrained reader's, "-tr"
    for the reader trained apart's."""

    def acc(name: str | None, split: str) -> float | None:
        d = found.get(name or "", {}).get(split)
        return None if d is None else d["groups"]["all"]["accuracy"]

    # the SFT+GRPO run that finished; None where none did (PROOF_GRPO_RUNS=none: SFT only)
    runs = ("rlm-grpo", "rlm-grpo-masked") if not reader else (f"rlm-grpo{reader}",)
    grpo = next((name for name in runs if name in found), None)
    grpo_u, direct_u, sft_u, grpo_s = (
        acc(grpo, "heldout_unseen"),
        acc("direct", "heldout_unseen"),
        acc(f"rlm-sft{reader}", "heldout_unseen"),
        acc(grpo, "heldout"),
    )
    key = (grpo, f"rlm-sft{reader}", "heldout_unseen")
    test = next((t for t in tests if (t["a"], t["b"], t["split"]) == key), None)

    def check(value: float | None, ok: bool | None) -> dict[str, Any]:
        return {"value": value, "met": ok}

    both = grpo_u is not None and direct_u is not None
    return {
        "grpo_run": grpo,
        "unseen_grpo_at_least_30pct": check(grpo_u, None if grpo_u is None else grpo_u >= 0.30),
        "unseen_grpo_20_points_over_direct": check(
            None if not both else grpo_u - direct_u, None if not both else grpo_u - direct_u >= 0.20
        ),
        "unseen_grpo_5_points_over_sft_p_below_0.05": check(
            None if test is None else {"points": test["points"], "p_value": test["p_value"]},
            None if test is None else test["points"] >= 5 and test["p_value"] < 0.05,
        ),
        "in_distribution_at_least_75pct": check(grpo_s, None if grpo_s is None else grpo_s >= 0.75),
        "sft_unseen": sft_u,
    }


def episode_figures(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """`trace_stats` of each policy's sampled episodes that the folder holds, by (policy, split)."""
    figures = {}
    for name, _ in POLICIES:
        for split, suffix in SPLITS:
            sample = folder / f"eval_{name}{suffix}_traces_sample.jsonl"
            if sample.exists():
                rows = [json.loads(line) for line in sample.read_text().splitlines() if line.strip()]
                figures[(name, split)] = episode_stats(rows)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--commands", type=Path, help="the commands that made the results, one per line")
    parser.add_argument("--rows", type=Path, help="also write every policy's per-task rows here (JSON lines)")
    args = parser.parse_args()
    found = load(args.folder)
    tests = comparisons(found)
    print(tables(found))
    print("\nExact McNemar tests on the same tasks (A right and B wrong / the other way):\n")
    print("| A | B | split | n | only A | only B | points | p |")
    print("|---|---|---|---|---|---|---|---|")
    for t in tests:
        print(
            f"| {t['a']} | {t['b']} | {t['split']} | {t['n']} | {t['only_a']} | {t['only_b']} | "
            f"{t['points']:+.1f} | {t['p_value']:.3g} |"
        )
    inside = episode_figures(args.folder)
    if inside:
        print("\nInside the sampled episodes (scripts/gpu/trace_stats.py):\n")
        print(
            "| policy | split | episodes | turns | with an error | NameError | SyntaxError | cut | "
            "repeats | error-free after an error |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        for (name, split), f in inside.items():
            kinds = f["errors_by_kind"]
            print(
                f"| {name} | {split} | {f['episodes']} | {f['turns']} | {f['turns_with_error']} | "
                f"{kinds.get('NameError', 0)} | {kinds.get('SyntaxError', 0)} | {f['turns_cut_at_token_limit']} | "
                f"{f['turns_repeating_previous_cell']} | {f['of_them_error_free']} of {f['turns_after_an_error']} |"
            )
        print("\nThe readers in those episodes (the engine-answered `llm()` replies):\n")
        print("| policy | split | replies | at the reply budget | looping (an item or a cycle) | not found |")
        print("|---|---|---|---|---|---|")
        for (name, split), f in inside.items():
            print(
                f"| {name} | {split} | {f['reader_calls']} | {f['reader_replies_at_budget']} | "
                f"{f['reader_replies_looping']} | {f['reader_replies_not_found']} |"
            )
    if args.rows:
        write_rows(found, args.rows)
        print(f"\nwrote {args.rows}")
    if args.json:
        labels = dict(POLICIES)
        policies = {
            name: {
                "label": labels[name],
                **{
                    split: {
                        **{
                            k: d["groups"]["all"][k]
                            for k in ("n", "correct", "accuracy", "ci_low", "ci_high")
                        },
                        "groups": d["groups"],
                    }
                    for split, d in splits.items()
                },
            }
            for name, splits in found.items()
        }
        commands = args.commands.read_text().splitlines() if args.commands else []
        record = {
            "policies": policies,
            "mcnemar": tests,
            **{
                "floors" if not suffix else f"floors_{reader}_reader": floors(found, tests, suffix)
                for reader, suffix in READERS
                if not suffix or f"rlm-sft{suffix}" in found
            },
            "trace_stats": {f"{name}/{split}": f for (name, split), f in inside.items()},
            "commands": commands,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
