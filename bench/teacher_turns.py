"""The teacher on generated tasks: how many it solves and how long its turns are in the student's tokens.

    PYTHONPATH=src python bench/teacher_turns.py [--seeds 4] [--lengths 8192 32768] [--max-turns 10] [--unseen]
        [--sub-input-tokens 4096]

Plays the scripted teacher (`fathom.policies.teacher`, its own reader shown what a student's reader of
``--sub-input-tokens`` would be) through the real rollout engine on
every training family (with ``--unseen``: every unseen family) x seed x length, with the Qwen2.5 tokenizer
the GPU proof's student has (`tiny-qwen` carries it), and prints one JSON line: tasks, correct, turns, longest and mean turn in tokens, and the
transcripts with a turn over the student's 384-token turn. Run it on two checkouts to compare a teacher change.
"""

from __future__ import annotations

import argparse
import json

import fathom.tasks as T
from fathom.models import ModelSpec, load_tokenizer
from fathom.policies.teacher import play_teacher
from fathom.rollout import ChatFormat

TURN_BUDGET = 384  # rollout.max_new_tokens in scripts/gpu/proof.sh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--lengths", type=int, nargs="+", default=[8192, 32768])
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument(
        "--unseen", action="store_true", help="the unseen families instead of the training ones"
    )
    parser.add_argument(
        "--sub-input-tokens",
        type=int,
        default=4096,
        help="the student reader's input budget (rollout.sub_max_input_tokens)",
    )
    args = parser.parse_args()
    chat = ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))
    families = sorted(T.UNSEEN_FAMILIES if args.unseen else set(T.FAMILIES) - set(T.UNSEEN_FAMILIES))
    tasks = [T.generate_task(f, s, n) for f in families for s in range(args.seeds) for n in args.lengths]
    episodes = play_teacher(chat, tasks, args.max_turns, sub_max_input_tokens=args.sub_input_tokens)
    lengths = [len(t.ids) for e in episodes for t in e.turns]
    over = [e.task_id for e in episodes if any(len(t.ids) > TURN_BUDGET for t in e.turns)]
    record = {
        "families": "unseen" if args.unseen else "training",
        "sub_input_tokens": args.sub_input_tokens,
        "tasks": len(tasks),
        "correct": sum(e.correct for e in episodes),
        "turns": len(lengths),
        "longest_turn": max(lengths),
        "mean_turn": round(sum(lengths) / len(lengths), 1),
        f"transcripts_with_a_turn_over_{TURN_BUDGET}": len(over),
        "over_budget_tasks": over,
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
