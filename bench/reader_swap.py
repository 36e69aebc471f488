"""Another reader for a student's recorded `llm()` calls: replay sampled evaluation episodes, ask a model.

    PYTHONPATH=src python bench/reader_swap.py TRACES TASKS --reader MODEL [--tokenizer MODEL]
        [--sub-input-tokens 4096] [--max-turns 10] [--max-new-tokens 128] [--max-chunk-tokens N] [--limit N]
        [--families F ...] [--only-gold] [--sub-system TEXT] [--out FILE.json]

    PYTHONPATH=src python bench/reader_swap.py teacher TASKS [--per-family 6] [--max-length 32768] [--reader MODEL]

TRACES is a ``traces_sample.jsonl`` of `fathom eval` (`scripts/gpu/proof.sh` keeps them), or ``teacher``: the
teacher's own episodes on the first ``--per-family`` tasks of each family of TASKS. TASKS is the held-out
file the episodes ran on (rebuilt with the same `fathom data build` seed: the script checks every replayed
observation against the recorded one). Each episode is replayed through the real rollout engine and
sandbox: the policy's turns are the recorded texts, and each `llm()` call is answered with the reply the
student's own reader gave then, so every cell sees what it saw and the chunks are the student's own. Each call
(prompt and chunk, cut as the student's reader was shown them) is then put to ``--reader`` with HF generate,
greedy, as the engine would ask it (`fathom.rollout.engine.sub_prompt_ids`), or with ``--sub-system`` as
the engine would ask it under another system prompt.

Prints one JSON object: per call the chunk's size, whether the chunk holds the gold answer, whether the
recorded reply and (with ``--reader``) the new reader's reply hold it or say "not found", and what the new
reply would score if the root submitted it as its answer; and those counts summed, in all and per family.
What it measures is a reader on the calls this student made, not an episode: after a different reply the
student would have written different cells. It runs on CPU (slow for a 1.5B model: ~40 s a call on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from fathom.env.sublm import SubLMReply, SubLMRequest
from fathom.models import ModelSpec, load_model, load_tokenizer
from fathom.policies.readers import ReaderView
from fathom.policies.scripted import ScriptedBackend, turn_of
from fathom.reward.metrics import score
from fathom.rollout import ChatFormat, RolloutConfig, Sampling
from fathom.rollout import engine as engine_module
from fathom.rollout.engine import sub_prompt_ids
from fathom.rollout.wiring import build_engine, hf_service
from fathom.tasks import Task, load_tasks

NOT_FOUND = re.compile(r"\bnot found\b", re.IGNORECASE)


class ReplayReader:
    """Answers the k-th `llm()` call of an episode with the k-th recorded reply, keeping what it was shown."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies, self.shown = (
            list(replies),
            [],
        )  # shown: (prompt, chunk) as the student's reader saw them

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        out = []
        for r in requests:
            if len(self.shown) >= len(self.replies):
                raise RuntimeError("the replay asked more llm() calls than the episode recorded")
            out.append(SubLMReply(self.replies[len(self.shown)]))
            self.shown.append((r.prompt, r.chunk))
        return out


def gold_items(task: Task) -> list[str]:
    answer = task.answer
    return [str(a) for a in answer] if isinstance(answer, list) else [str(answer)]


def holds(text: str, items: Sequence[str]) -> bool:
    """Every gold item appears in `text` (case-insensitive)."""
    low = text.lower()
    return all(item.lower() in low for item in items)


def replay(
    trace: dict[str, Any], task: Task, chat: ChatFormat, sub_input: int, max_turns: int
) -> tuple[list[tuple[str, str, str]], int]:
    """The episode's `llm()` calls as its reader was shown them (with the recorded reply), and how many of
    its turns' observations differ from the recorded ones (0: a faithful replay)."""
    turns = trace["turns"]
    replies = [s["reply"] for t in turns for s in t["subcalls"]]
    reader = ReplayReader(replies)

    def turn(conversation: str) -> str:
        at = turn_of(conversation)
        return turns[at]["text"] if at < len(turns) else "FINAL('the recorded episode ended here')"

    config = RolloutConfig(
        max_turns=max_turns,
        max_total_tokens=1 << 20,  # the recorded turns decide when it ends, not a budget
        sampling=Sampling(max_new_tokens=1 << 14),  # every recorded turn whole
        sub_max_input_tokens=sub_input,
    )
    engine = build_engine(
        hf_service(ScriptedBackend(chat, turn)), chat, config, ReaderView(reader, chat, sub_input)
    )
    (episode,) = engine.run_sync([task])
    differ = sum(a.observation != b["observation"] for a, b in zip(episode.turns, turns, strict=False))
    differ += abs(len(episode.turns) - len(turns))
    return [(p, c, r) for (p, c), r in zip(reader.shown, replies, strict=False)], differ


def teacher_rows(
    tasks: Sequence[Task], tokenizer: str, per_family: int, max_turns: int, sub_input: int
) -> list[dict[str, Any]]:
    """The teacher's episodes on the first `per_family` tasks of each family, as rows of an eval sample."""
    from fathom.eval.policies import TeacherPolicy

    families = sorted({t.family for t in tasks})
    chosen = [t for f in families for t in [t for t in tasks if t.family == f][:per_family]]
    teacher = TeacherPolicy(tokenizer_name=tokenizer, max_turns=max_turns, sub_max_input_tokens=sub_input)
    return [{"trace": r["trace"], "correct": r["correct"]} for r in teacher.run(chosen)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", help="a traces_sample.jsonl, or 'teacher': play the teacher on TASKS")
    parser.add_argument("tasks")
    parser.add_argument("--reader", help="the model that reads the calls (none: only where the answer lies)")
    parser.add_argument("--tokenizer", help="the student's tokenizer (default: the reader's, else tiny-qwen)")
    parser.add_argument("--sub-input-tokens", type=int, default=4096, help="rollout.sub_max_input_tokens")
    parser.add_argument("--max-turns", type=int, default=10, help="the evaluation's turn cap")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="rollout.sub_max_new_tokens")
    parser.add_argument("--max-chunk-tokens", type=int, help="skip calls whose prompt is longer (CPU time)")
    parser.add_argument("--max-length", type=int, help="only tasks of at most this many tokens")
    parser.add_argument("--per-family", type=int, default=6, help="with 'teacher': tasks a family")
    parser.add_argument("--limit", type=int, help="only the first N episodes")
    parser.add_argument("--families", nargs="+", help="only the episodes of these families")
    parser.add_argument(
        "--only-gold", action="store_true", help="ask --reader only the calls whose chunk holds the answer"
    )
    parser.add_argument("--sub-system", help="the reader's system prompt (default: the engine's SUB_SYSTEM)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    if args.sub_system is not None:  # sub_prompt_ids reads the engine's constant at each call
        engine_module.SUB_SYSTEM = args.sub_system

    tasks = [
        t for t in load_tasks(args.tasks) if args.max_length is None or t.length_tokens <= args.max_length
    ]
    by_id = {t.id: t for t in tasks}
    tokenizer_name = args.tokenizer or args.reader or "tiny-qwen"
    chat = ChatFormat(load_tokenizer(ModelSpec(name=tokenizer_name)))
    model = None
    if args.reader:
        model, tokenizer = load_model(ModelSpec(name=args.reader, dtype="float32", device="cpu"))
        if tokenizer.get_vocab() != chat.tokenizer.get_vocab():
            raise SystemExit(f"the reader {args.reader} does not share the student's tokenizer")
    started = time.perf_counter()
    if args.traces == "teacher":
        rows = teacher_rows(tasks, tokenizer_name, args.per_family, args.max_turns, args.sub_input_tokens)
    else:
        lines = Path(args.traces).read_text().splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        rows = [r for r in rows if r["trace"]["task_id"] in by_id]
    if args.families:
        rows = [r for r in rows if by_id[r["trace"]["task_id"]].family in args.families]
    rows = rows[: args.limit]
    calls, unfaithful = [], 0
    for row in rows:
        trace = row["trace"]
        task = by_id[trace["task_id"]]
        shown, differ = replay(trace, task, chat, args.sub_input_tokens, args.max_turns)
        unfaithful += differ > 0
        gold = gold_items(task)
        for prompt, chunk, old in shown:
            ids = sub_prompt_ids(chat, SubLMRequest(prompt, chunk), args.sub_input_tokens)
            if args.max_chunk_tokens and len(ids) > args.max_chunk_tokens:
                continue
            call = {
                "task": task.id, "family": task.family, "prompt_tokens": len(ids),
                "chunk_holds_gold": holds(chunk, gold), "old_holds_gold": holds(old, gold),
                "old_not_found": bool(NOT_FOUND.search(old)), "old": old[:300],
            }  # fmt: skip
            if model is not None and (call["chunk_holds_gold"] or not args.only_gold):
                with torch.no_grad():
                    out = model.generate(
                        torch.tensor([ids]), max_new_tokens=args.max_new_tokens, do_sample=False,
                        pad_token_id=chat.tokenizer.pad_token_id,
                    )  # fmt: skip
                new = chat.turn_text(out[0, len(ids) :].tolist()).strip()
                call.update(
                    new_holds_gold=holds(new, gold), new_not_found=bool(NOT_FOUND.search(new)),
                    new_as_answer=score(task.metric, new, task.answer),  # the reply submitted as it is
                    new=new[:300],
                )  # fmt: skip
            calls.append(call)
            print(json.dumps(call), flush=True)
    keys = [k for k in ("chunk_holds_gold", "old_holds_gold", "new_holds_gold", "old_not_found", "new_not_found")
            if model is not None or not k.startswith("new")]  # fmt: skip
    with_gold = [c for c in calls if c["chunk_holds_gold"]]
    families = sorted({by_id[r["trace"]["task_id"]].family for r in rows})
    summary = {
        "reader": args.reader, "sub_system": engine_module.SUB_SYSTEM, "traces": args.traces, "episodes": len(rows),
        "episodes_replayed_unfaithfully": unfaithful, "calls": len(calls),
        "asked_the_reader": sum("new" in c for c in calls),  # all calls, or with --only-gold those with gold
        **{k: sum(c.get(k, False) for c in calls) for k in keys},
        "of_calls_whose_chunk_holds_gold": {k: sum(c.get(k, False) for c in with_gold) for k in keys[1:]},
        # what the new reader's replies would score if the root submitted each as it is (a full score counts)
        "new_as_answer_full": sum(c.get("new_as_answer", 0.0) == 1.0 for c in calls),
        "by_family": {
            f: {
                "episodes": sum(by_id[r["trace"]["task_id"]].family == f for r in rows),
                # an eval sample's rows hold no score; the teacher's do
                "correct": sum(r["correct"] for r in rows if by_id[r["trace"]["task_id"]].family == f)
                if all("correct" in r for r in rows) else None,
                "calls": sum(c["family"] == f for c in calls),
                "chunks_holding_gold": sum(c["family"] == f and c["chunk_holds_gold"] for c in calls),
            }
            for f in families
        },
        "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    print(json.dumps(summary))
    if args.out:
        Path(args.out).write_text(json.dumps({"summary": summary, "calls": calls}, indent=2) + "\n")


if __name__ == "__main__":
    main()
