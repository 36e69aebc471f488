"""How much of SFT's loss the reader rows are: loss tokens of the reader rows against the transcripts'.

    PYTHONPATH=src python bench/reader_share.py [--tasks 96] [--ratio 1.0] [--tokenizer tiny-qwen]

Plays the teacher on `--tasks` SFT tasks of the GPU proof's tiers (8K-128K, every difficulty; reader view
4,096 tokens, 10 turns of 384 tokens, as `scripts/gpu/proof.sh` sets them), then builds the rows `fathom sft`
would train on with SFT's own functions (`fathom.train.sft.trainable` and `to_example` for the transcripts,
`fathom.train.reader_sft.draw_calls` for the reader rows, `--ratio` per transcript). HF's Trainer averages the
loss over an optimizer step's loss tokens, so a kind's share of the loss tokens is its share of what a mixed
step minimises. Prints the reply tokens per reader-row kind and the shares. `tiny-qwen` carries the real
Qwen2.5 tokenizer (the GPU proof's student's).

It measures token counts, not training; bench/RESULTS.md ("After run 17") says what they explain.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

from fathom.models import load_tokenizer
from fathom.models.loading import ModelSpec
from fathom.rollout import ChatFormat
from fathom.train.configfile import load_config
from fathom.train.reader_sft import call_kind, draw_calls, reply_ids
from fathom.train.sft import to_example, trainable
from fathom.train.sft_collect import collect_transcripts, sft_tasks

TIERS = '[{name="all", lengths=[8192, 16384, 32768, 131072], difficulties=["easy", "medium", "hard"]}]'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=96)
    parser.add_argument("--ratio", type=float, default=1.0, help="sft.reader_ratio")
    parser.add_argument("--tokenizer", default="tiny-qwen")
    args = parser.parse_args()
    config = load_config(
        "configs/smollm2-135m-gpu.toml",
        [
            f"--model.name={args.tokenizer}", f"--sft.num_tasks={args.tasks}", "--sft.source=teacher", "--sft.max_turns=10",
            "--sft.reader_echo=0.25", f"--curriculum.tiers={TIERS}", "--eval.tier=0", "--sft.max_length=8192",
            "--rollout.sub_max_input_tokens=4096", "--rollout.max_turns=10", "--rollout.max_new_tokens=384",
            "--rollout.max_total_tokens=8192", "--logging.progress=false",
        ],
    )  # fmt: skip
    chat = ChatFormat(load_tokenizer(ModelSpec(name=args.tokenizer)))
    calls: list[dict[str, str]] = []
    records = collect_transcripts(config, chat.tokenizer, sft_tasks(config), calls)
    usable, _ = trainable(records, config)
    transcript_tokens = sum(sum(to_example(r)["assistant_masks"]) for r in usable)
    plain = [c for c in calls if not c.get("echo")]  # as `fathom.train.sft.reader_rows` reads them
    distinct = {(c["prompt"], c["chunk"], c["reply"]) for c in plain}
    picked, _ = draw_calls(
        chat, plain, config.rollout.sub_max_new_tokens, round(args.ratio * len(usable)), config.sft.seed
    )
    tokens: dict[str, list[int]] = defaultdict(list)
    for c in picked:
        tokens[call_kind(c)].append(len(reply_ids(chat, c["reply"])))
    reader_tokens = sum(sum(v) for v in tokens.values())
    total = transcript_tokens + reader_tokens
    print(json.dumps({
        "tasks": args.tasks, "transcripts_trained": len(usable), "distinct_reader_calls": len(distinct),
        "reader_rows": len(picked),
        "reply_tokens_by_kind": {k: {"rows": len(v), "mean": round(statistics.mean(v), 1)} for k, v in tokens.items()},
        "loss_tokens_per_transcript": round(transcript_tokens / max(len(usable), 1), 1),
        "reader_share_of_loss_tokens": round(reader_tokens / total, 4),
        "answer_rows_share_of_loss_tokens": round(sum(tokens.get("answer", [])) / total, 4),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
