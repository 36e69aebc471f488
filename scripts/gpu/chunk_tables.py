"""Tables of `scripts/gpu/teacher_chunks.sh`'s archive: `teacher-br` at each chunk size, per split and family,
paired on the same tasks (exact McNemar) against the largest size measured, and against GPU proof run 20's rows
on each split whose held-out file is run 20's (by its sha256 in the archive's `data.sha256`).

    PYTHONPATH=src python scripts/gpu/chunk_tables.py DIR/keep [--run20 bench/results/gpu_proof20_rows.jsonl]
        [--json OUT.json] [--rows OUT_rows.jsonl]

It reads only the archive's `c<size>[-unseen]_eval.jsonl` files (and run 20's rows file); it prints markdown.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

from fathom.eval.runner import read_rows
from fathom.eval.stats import paired, wilson

# run 20's held-out files (sha256 prefixes): its rows pair only with a split whose file is byte for byte these
RUN20_DATA = {"heldout": "761d653f", "heldout_unseen": "764cb1de"}
SPLITS = (("", "heldout", "training families"), ("-unseen", "heldout_unseen", "unseen families"))


def load(keep: Path) -> dict[tuple[int, str], dict[str, dict]]:
    """(chunk size, split) -> task id -> row."""
    out: dict[tuple[int, str], dict[str, dict]] = {}
    for path in sorted(keep.glob("c*_eval.jsonl")):
        m = re.fullmatch(r"c(\d+)(-unseen)?_eval\.jsonl", path.name)
        if m is None:
            continue
        split = "heldout_unseen" if m.group(2) else "heldout"
        out[(int(m.group(1)), split)] = {r["id"]: r for r in read_rows(path)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keep", type=Path)
    parser.add_argument("--run20", type=Path, help="GPU proof run 20's per-task rows (policy teacher-br)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--rows", type=Path, help="write every row (size, split, id, family, correct, calls)")
    args = parser.parse_args()
    runs = load(args.keep)
    sizes = sorted({s for s, _ in runs}, reverse=True)
    own = max(sizes)  # the teacher's own chunk (7,680) is the largest measured
    result: dict = {"policies": [], "mcnemar": []}
    print("| chunk (characters) | split | n | right | accuracy [95%] | llm() calls a task |")
    print("|--:|---|--:|--:|---|--:|")
    for size in sizes:
        for _, split, name in SPLITS:
            rows = list(runs.get((size, split), {}).values())
            if not rows:
                continue
            n, right = len(rows), sum(r["correct"] for r in rows)
            lo, hi = wilson(right, n)
            calls = sum(r["llm_calls"] for r in rows) / n
            print(
                f"| {size:,} | {name} | {n} | {right} | {right / n:.0%} [{lo:.0%}, {hi:.0%}] | {calls:.1f} |"
            )
            result["policies"].append(
                {
                    "chunk_chars": size,
                    "split": split,
                    "n": n,
                    "correct": right,
                    "accuracy": right / n,
                    "ci_low": lo,
                    "ci_high": hi,
                    "llm_calls_per_task": calls,
                }
            )
    baselines = [(f"{own:,} (this run)", {sp: runs.get((own, sp), {}) for _, sp, _ in SPLITS})]
    sha = (args.keep / "data.sha256").read_text() if (args.keep / "data.sha256").exists() else ""
    same = {sp for sp, h in RUN20_DATA.items() if re.search(rf"^{h}\S*\s+\S*/{sp}\.jsonl$", sha, re.M)}
    if args.run20 and not same & {sp for _, sp in runs}:
        raise SystemExit(f"--run20: no held-out file measured here is run 20's ({sha.split()[:1]}...)")
    if args.run20:
        r20: dict[str, dict[str, dict]] = collections.defaultdict(dict)
        for line in args.run20.read_text().splitlines():
            r = json.loads(line)
            if r["policy"] == "teacher-br" and r["split"] in same:
                r20[r["split"]][r["id"]] = r
        baselines.append(("7,680 (run 20)", r20))
    print("\n| A (chunk) | B (chunk) | split | only A | only B | points | p |")
    print("|---|---|---|--:|--:|--:|--:|")
    for size in sizes:
        for bname, base in baselines:
            if bname.startswith(f"{size:,} (this"):
                continue
            for _, split, name in SPLITS:
                a, b = runs.get((size, split)), base.get(split)
                if not a or not b:
                    continue
                t = paired(a.values(), b.values())  # refuses two different task sets
                only_a, only_b, pts, p = t.only_a, t.only_b, 100 * (t.only_a - t.only_b) / t.n, t.p_value
                print(f"| {size:,} | {bname} | {name} | {only_a} | {only_b} | {pts:+.1f} | {p:.2g} |")
                result["mcnemar"].append(
                    {
                        "a": size,
                        "b": bname,
                        "split": split,
                        "only_a": only_a,
                        "only_b": only_b,
                        "points": pts,
                        "p": p,
                    }
                )
    for _, split, name in SPLITS:
        fams = sorted({r["family"] for s in sizes for r in runs.get((s, split), {}).values()})
        if not fams:
            continue
        print(f"\n{name}, tasks right per family:\n")
        print("| family | n | " + " | ".join(f"{s:,}" for s in sizes) + " |")
        print("|---|--:|" + "--:|" * len(sizes))
        for fam in fams:
            cells, n = [], 0
            for s in sizes:
                rows = [r for r in runs.get((s, split), {}).values() if r["family"] == fam]
                n = max(n, len(rows))
                cells.append(str(sum(r["correct"] for r in rows)))
            print(f"| {fam} | {n} | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if args.rows:
        with args.rows.open("w") as f:
            for (size, split), rows in sorted(runs.items()):
                for r in rows.values():
                    f.write(
                        json.dumps(
                            {
                                "chunk_chars": size,
                                "split": split,
                                "id": r["id"],
                                "family": r["family"],
                                "length_tokens": r["length_tokens"],
                                "correct": r["correct"],
                                "llm_calls": r["llm_calls"],
                                "answer": r["answer"],
                            }
                        )
                        + "\n"
                    )


if __name__ == "__main__":
    main()
