"""What went wrong inside sampled evaluation episodes: per trace-sample file of a GPU proof's archive
(`keep/eval_NAME[-unseen]_traces_sample.jsonl`), how many turns raised an error and which, how many were cut
at the token limit, repeated the previous cell word for word, or recovered after an error, and which
undefined names the `NameError`s were about; and of the replies the policy's own reader gave its `llm()`
calls, how many ran to the reply budget, looped on one item, or said "not found".

    python scripts/gpu/trace_stats.py keep/eval_rlm-sft-unseen_traces_sample.jsonl [more files] [--json OUT]

It reads only the traces (each row `{"id", "trace": ...}`, the trace read back as `fathom.rollout.Episode`;
a turn's errors are its cells' `error`s, a timed-out cell counts as "timeout"); it does not judge answers
(eval.jsonl does).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from fathom.policies.moves import MISSING
from fathom.rollout.episode import Episode

UNDEFINED = re.compile(r"NameError: name '(\w+)' is not defined")
# an llm()/llm_batch() prompt opened with a single quote: breaks on the first apostrophe in the question
SINGLE_QUOTED_PROMPT = re.compile(r"llm(?:_batch)?\(\s*\[?\(?\s*'(?!'')")


def error_kind(error: str) -> str:
    """`NameError` from a cell's traceback (its last line names the exception)."""
    return error.strip().splitlines()[-1].split(":")[0].strip()


# the reply budget of a sub-call in the GPU proof (proof.sh: --rollout.sub_max_new_tokens=128)
SUB_MAX_NEW_TOKENS = 128
# a looping reply: one item (a line, or a comma-separated entry) at least this often, and half of all items;
# or a block of 2 to LOOP_PERIOD items repeated at least this often at its end (a cycle through a list)
LOOP_REPEATS = 3
LOOP_PERIOD = 8


def looping(reply: str) -> bool:
    """A reply that repeats one item, or cycles through a few, as greedy decoding does when it falls into a
    loop (an untrained reader asked to label lines cycles through the labels the prompt lists). It cannot tell
    a loop from a label list whose lines truly share one label: the trace keeps the chunk's size, not its lines."""
    items = [i.strip() for line in reply.splitlines() for i in line.split(",") if i.strip()]
    if not items:
        return False
    top = Counter(items).most_common(1)[0][1]
    return (top >= LOOP_REPEATS and 2 * top >= len(items)) or any(
        cycles(items, period) for period in range(2, LOOP_PERIOD + 1)
    )


def cycles(items: list[str], period: int) -> bool:
    """The items end in a block of `period` distinct items repeated at least LOOP_REPEATS times (the last
    repeat may be cut short where the reply budget ran out)."""
    i = len(items) - 1 - period
    while i >= 0 and items[i] == items[i + period]:
        i -= 1
    span = len(items) - 1 - i  # the periodic tail: from i + 1 on, every item equals the one `period` later
    return span >= period * LOOP_REPEATS and len(set(items[i + 1 : i + 1 + period])) == period


def reader_stats(rows: list[dict[str, Any]], budget: int = SUB_MAX_NEW_TOKENS) -> dict[str, int]:
    """The engine-answered `llm()` replies of the episodes (the trace's `engine_subcalls`, which carry the
    reply's token count): how many, how many used the whole reply budget, looped, or said "not found"."""
    calls = [s for row in rows for s in row["trace"].get("engine_subcalls", [])]
    return {
        "reader_calls": len(calls),
        "reader_replies_at_budget": sum(s["tokens"] >= budget for s in calls),
        "reader_replies_looping": sum(looping(s["reply"]) for s in calls),
        "reader_replies_not_found": sum(MISSING in s["reply"].lower() for s in calls),
    }


def episode_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    turns = errors = cut = repeated = after_error = recovered = single_quoted = 0
    kinds: Counter[str] = Counter()
    names: Counter[str] = Counter()
    ends: Counter[str] = Counter()
    for row in rows:
        episode = Episode.from_json(row["trace"])
        ends[str(episode.end_reason)] += 1
        previous: str | None = None
        previous_failed = False
        for turn in episode.turns:
            turns += 1
            raised = [
                ("timeout" if c.timed_out else error_kind(c.error))
                for c in turn.cells
                if c.error or c.timed_out
            ]
            failed = bool(raised)
            errors += failed
            kinds.update(raised)
            names.update(n for c in turn.cells if c.error for n in UNDEFINED.findall(c.error))
            cut += not turn.finished
            repeated += previous is not None and turn.text.strip() == previous.strip()
            if previous_failed:
                after_error += 1
                recovered += not failed
            single_quoted += bool(SINGLE_QUOTED_PROMPT.search(turn.text))
            previous, previous_failed = turn.text, failed
    return {
        "episodes": len(rows),
        "end_reasons": dict(ends.most_common()),
        "turns": turns,
        "turns_with_error": errors,
        "errors_by_kind": dict(kinds.most_common()),
        "undefined_names": dict(names.most_common(10)),
        "turns_cut_at_token_limit": cut,
        "turns_repeating_previous_cell": repeated,
        "turns_after_an_error": after_error,
        "of_them_error_free": recovered,
        "turns_with_single_quoted_llm_prompt": single_quoted,
    } | reader_stats(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    report = {}
    for path in args.files:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        report[path.name] = stats = episode_stats(rows)
        print(f"{path.name}: {json.dumps(stats)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
