"""``fathom sft``: warm-start a policy on correct REPL transcripts, with loss on the policy's own tokens only.

    fathom sft --config configs/tiny-cpu.toml [--sft.source=openai --sft.teacher_url=... --sft.teacher_model=...]

1. Transcripts: ``sft.num_tasks`` tasks of curriculum tier ``sft.tier`` played through the real environment
   by the rollout engine, so each transcript is token-exact for the student: ``prompt_ids``,
   ``completion_ids`` (policy turns and REPL outputs in order) and ``env_mask``. The policy is the scripted
   teacher (``source = "teacher"``, the default: it knows only the conversation; transcripts whose code
   searches for something not yet seen fail `fathom.policies.grounding` and are dropped, and counted), the
   scripted expert (``"expert"``, it knows the formats), any teacher behind an OpenAI-compatible endpoint
   (``"openai"``; it also answers the ``llm()`` calls), or a transcripts file written earlier (``"file"``).
   All are saved to ``RUN/transcripts.jsonl``; only correct (and grounded) ones are trained on, and only
   those whose every policy turn fits the student's per-turn budget, ``rollout.max_new_tokens`` (the new
   tokens it generates a turn under in GRPO and evaluation), counted in the student's tokens as its SFT
   row holds them: a longer turn would teach a cell the student is cut off in the middle of. Those dropped
   are counted (``over_budget``); that none is left is an error. The scripted sources' reader calls go to
   ``RUN/reader_calls.jsonl``; ``sft.reader_ratio`` of them per trained transcript become reader-role rows
   (`fathom.train.reader_sft`; replies over ``rollout.sub_max_new_tokens`` are dropped: ``reader_over_budget``;
   echoes from ``sft.reader_echo`` (`fathom.train.sft_collect`) are never rows: ``reader_echoes``). With
   ``sft.teacher_slips`` the teacher's faulty turns (repaired on the next turn) are in the transcript but get
   loss mask 0 (``slip_turns``, counted in the summary). With ``sft.rows = "reader"`` only the reader rows
   are trained (a separate reader model; ``sft.reader_calls`` names another run's recorded calls, and
   ``sft.source = "file"`` its transcripts, which then only size the draw).
2. TRL ``SFTTrainer`` on the pre-tokenized dataset ``input_ids`` + ``assistant_masks`` (0 on the prompt and on
   every environment token, 1 on sampled tokens: TRL turns it into ``labels = -100`` off the mask).
3. With ``sft.holdout`` > 0, a share of the transcripts (whole tasks) is held out and scored as training
   runs; `fathom.train.sft_stopping` keeps the best held-out loss and stops on no improvement or when the
   held-out policy entropy falls under ``sft.entropy_floor`` (memorised transcripts leave GRPO nothing to
   explore).
4. The assistant-token loss on (the first 64 of) the training transcripts before and after, in
   ``RUN/summary.json``; the adapter (or full model) and a merged 16-bit model in ``RUN/final``: the
   starting point of `fathom grpo` (``--model.init_from=RUN/final/adapter``).

This module does not evaluate the policy on held-out tasks; `fathom eval` does.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path
from typing import Any

from fathom.train import checkpoint
from fathom.train.cli import add_config_arguments, config_from_args
from fathom.train.config import TrainConfig
from fathom.train.configfile import dump_toml
from fathom.train.runlog import JsonlWriter, read_jsonl, report_to
from fathom.train.sft_collect import collect_transcripts, sft_tasks
from fathom.train.sft_stopping import HeldoutStopping

LOSS_PROBE = 64  # transcripts the before/after assistant loss is measured on


def turn_lengths(record: dict[str, Any]) -> list[int]:
    """The tokens of each policy turn of a transcript, in order: the runs of 1 in its ``env_mask`` (what the
    policy sampled, its end-of-turn token included; environment replies always lie between two turns)."""
    lengths, run = [], 0
    for m in record["env_mask"]:
        if m:
            run += 1
        elif run:
            lengths.append(run)
            run = 0
    return [*lengths, run] if run else lengths


def trainable(
    records: list[dict[str, Any]], config: TrainConfig
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The transcripts SFT trains on, the counts of those left out and the longest trained turn: correct,
    grounded (teacher transcripts), at most ``sft.max_length`` tokens, no turn longer than
    ``rollout.max_new_tokens``.

    Raises when correct transcripts exist but every one has a turn over that budget: the student could
    generate none of them, and training on the rest (reader rows alone) is not what was asked for."""
    s, budget = config.sft, config.rollout.max_new_tokens
    # An ungrounded teacher transcript searched for something it had not seen: never trained on.
    ungrounded = sum(not r.get("grounding", {"ok": True})["ok"] for r in records)
    good = [r for r in records if r["correct"] and r.get("grounding", {"ok": True})["ok"]]
    fitting = [r for r in good if len(r["prompt_ids"]) + len(r["completion_ids"]) <= s.max_length]
    longest_turn = [max(turn_lengths(r), default=0) for r in fitting]
    usable = [r for r, n in zip(fitting, longest_turn, strict=True) if n <= budget]
    if fitting and not usable:
        longest = sorted(longest_turn, reverse=True)
        raise RuntimeError(
            f"every one of the {len(fitting)} correct transcripts has a turn over the per-turn budget of "
            f"{budget} new tokens (rollout.max_new_tokens: what the student generates a turn in GRPO and "
            f"evaluation); their longest turns: {longest[:5]}{' ...' if len(longest) > 5 else ''} tokens. "
            "Nothing to train on: shorten the teacher's turns or raise rollout.max_new_tokens"
        )
    counts = {
        "ungrounded": ungrounded,
        "too_long": len(good) - len(fitting),
        "over_budget": len(fitting) - len(usable),
        "longest_turn": max((n for n in longest_turn if n <= budget), default=0),
    }
    return usable, counts


def to_example(record: dict[str, Any]) -> dict[str, list[int]]:
    """A pre-tokenized SFT row: loss only where the policy sampled (``assistant_masks`` = 1), except on the
    turns the teacher wrote as slips (``slip_turns``: a faulty cell shown only to be repaired)."""
    prompt, completion, mask = record["prompt_ids"], record["completion_ids"], list(record["env_mask"])
    if len(completion) != len(mask):
        raise ValueError(f"transcript {record['task_id']}: completion and env_mask lengths differ")
    slips, turn = set(record.get("slip_turns", ())), -1
    if slips and max(slips) >= len(turn_lengths(record)):
        raise ValueError(f"transcript {record['task_id']}: a slip turn past its last turn")
    for i, m in enumerate(record["env_mask"]):
        turn += bool(m) and (i == 0 or not record["env_mask"][i - 1])  # a run of 1 starts a turn
        if m and turn in slips:
            mask[i] = 0
    return {"input_ids": prompt + completion, "assistant_masks": [0] * len(prompt) + mask}


def split_heldout(
    records: list[dict[str, Any]], fraction: float, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(trained, held out): `fraction` of the transcripts, whole tasks, drawn with `seed`; at least one of
    each when there are two or more and the fraction is above zero."""
    if fraction <= 0 or len(records) < 2:
        return list(records), []
    order = sorted(range(len(records)), key=lambda i: records[i]["task_id"])
    random.Random(seed).shuffle(order)
    n = min(len(records) - 1, max(1, round(fraction * len(records))))
    held = set(order[:n])
    return [r for i, r in enumerate(records) if i not in held], [
        r for i, r in enumerate(records) if i in held
    ]


def reader_rows(config: TrainConfig, run_dir: Path, n_transcripts: int) -> tuple[list[Any], int]:
    """``sft.reader_ratio`` reader-role rows per trained transcript, from ``RUN/reader_calls.jsonl``, and the
    number of distinct calls left out for a reply over ``rollout.sub_max_new_tokens``."""
    from fathom.models import load_tokenizer
    from fathom.models.loading import ModelSpec
    from fathom.rollout import ChatFormat
    from fathom.train.reader_sft import reader_examples

    path = reader_calls_path(config, run_dir)
    want = round(config.sft.reader_ratio * n_transcripts)
    if want == 0 or not path.exists():
        return [], 0
    calls = [c for c in read_jsonl(path) if not c.get("echo")]  # an echo is wrong by construction
    chat = ChatFormat(
        load_tokenizer(ModelSpec(name=config.model.name, chat=config.model.chat)), config.model.chat
    )
    r = config.rollout
    rows, over = reader_examples(
        chat, calls, r.sub_max_input_tokens, r.sub_max_new_tokens, want, config.sft.seed
    )
    return [row for row in rows if len(row["input_ids"]) <= config.sft.max_length], over


def reader_calls_path(config: TrainConfig, run_dir: Path) -> Path:
    """Where the recorded reader calls are: ``sft.reader_calls``, else the run's own collection."""
    return Path(config.sft.reader_calls) if config.sft.reader_calls else run_dir / "reader_calls.jsonl"


def reader_echoes(config: TrainConfig, run_dir: Path) -> int:
    """The distinct reader calls answered with an echo (``sft.reader_echo``): never trained on."""
    path = reader_calls_path(config, run_dir)
    calls = read_jsonl(path) if path.exists() else []
    return len({(c["prompt"], c["chunk"]) for c in calls if c.get("echo")})


def assistant_loss(model: Any, examples: list[dict[str, list[int]]]) -> float:
    """Mean next-token loss over assistant tokens (the quantity SFT minimises), one example at a time."""
    import torch

    device = next(model.parameters()).device
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for ex in examples:
            ids = torch.tensor([ex["input_ids"]], device=device)
            labels = ids.clone()
            labels[0, torch.tensor(ex["assistant_masks"], device=device) == 0] = -100
            n = int((labels[0, 1:] != -100).sum())
            total += float(model(input_ids=ids, labels=labels).loss) * n
            count += n
    model.train(was_training)
    return total / max(count, 1)


def run_sft(config: TrainConfig) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import TrainerCallback, set_seed
    from trl import SFTConfig as TRLSFTConfig
    from trl import SFTTrainer

    from fathom.models import load_tokenizer
    from fathom.models.loading import ModelSpec
    from fathom.train.nonfinite import SkipNonFiniteSteps
    from fathom.train.policy import load_policy, merge_base, process_state, use_bf16
    from fathom.train.sft_batches import KindBlockSampler

    s = config.sft
    run_dir = Path(config.run.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.toml").write_text(dump_toml(config), encoding="utf-8")  # same text from every rank
    device, dist = process_state(config.run.device, config.run.gpu_memory_fraction)
    started = time.perf_counter()
    transcripts = Path(s.transcripts) if s.source == "file" else run_dir / "transcripts.jsonl"
    if s.source != "file" and dist.is_main_process:  # collected once; every rank trains on the same file
        tokenizer = load_tokenizer(ModelSpec(name=config.model.name, chat=config.model.chat))
        calls: list[dict[str, str]] = []
        records = collect_transcripts(config, tokenizer, sft_tasks(config), calls)
        for path, rows in ((transcripts, records), (run_dir / "reader_calls.jsonl", calls)):
            tmp = path.with_suffix(".jsonl.tmp")
            with tmp.open("w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)
            tmp.replace(path)
    dist.wait_for_everyone()
    records = read_jsonl(transcripts)
    collect_s = time.perf_counter() - started
    usable, dropped = trainable(records, config)
    trained, heldout = split_heldout(usable, s.holdout, s.seed)
    readers, reader_over_budget = reader_rows(config, run_dir, len(trained))
    # rows = reader: the transcripts only size the draw of reader rows (sft.reader_ratio per transcript)
    if s.rows == "reader":
        trained = []
    examples = [to_example(r) for r in trained]
    transcript_examples = len(examples)
    examples += readers
    if not examples:
        raise RuntimeError(
            f"no reader row from {reader_calls_path(config, run_dir)} for {len(usable)} usable transcripts: "
            "nothing to train on"
            if s.rows == "reader"
            else f"no correct transcript of at most {s.max_length} tokens among {len(records)}: nothing to train on"
        )
    heldout_examples = [to_example(r) for r in heldout]

    set_seed(config.run.seed)
    model, tokenizer = load_policy(config.model, device)
    probe = examples[:LOSS_PROBE]
    loss_before = assistant_loss(model, probe)
    if dist.is_main_process:
        (run_dir / "metrics.jsonl").unlink(missing_ok=True)  # SFT does not resume: a rerun starts a new curve
    metrics = JsonlWriter(run_dir / "metrics.jsonl", enabled=dist.is_main_process)

    class LogToJsonl(TrainerCallback):
        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            if logs is not None and state.is_world_process_zero:
                metrics.write({"step": state.global_step, "time": time.time(), **logs})

    evaluating = bool(heldout_examples)
    per_epoch = math.ceil(
        len(examples) / (s.per_device_train_batch_size * s.gradient_accumulation_steps * dist.num_processes)
    )
    args = TRLSFTConfig(
        output_dir=str(run_dir),
        eval_strategy="steps" if evaluating else "no",
        eval_steps=(s.eval_every or per_epoch) if evaluating else None,
        per_device_eval_batch_size=s.per_device_train_batch_size,
        num_train_epochs=s.epochs,
        learning_rate=s.learning_rate,
        per_device_train_batch_size=s.per_device_train_batch_size,
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        max_length=s.max_length,
        packing=False,
        assistant_only_loss=False,  # the mask comes with the data (assistant_masks), not from a template
        logging_steps=1,
        save_strategy="no",
        report_to=report_to(config.logging, run_dir) or "none",
        disable_tqdm=not config.logging.progress,
        use_cpu=device == "cpu",
        bf16=use_bf16(config.grpo.bf16, device),
        gradient_checkpointing=config.model.gradient_checkpointing,
        seed=config.run.seed,
    )
    stopping = HeldoutStopping(model, s.patience, s.entropy_floor, s.min_epochs) if evaluating else None
    guard = SkipNonFiniteSteps()  # one NaN step would make every later one train a NaN model
    trainer_class = SFTTrainer
    if s.reader_batches == "own" and readers:
        kinds = ["transcript"] * transcript_examples + ["reader"] * len(readers)
        block = s.per_device_train_batch_size * s.gradient_accumulation_steps * dist.num_processes
        sampler = KindBlockSampler(kinds, block, config.run.seed)

        class ReaderStepsApart(SFTTrainer):  # every optimizer step's rows of one kind (sft_batches)
            def _get_train_sampler(self, train_dataset: Any = None) -> Any:
                return sampler

        trainer_class = ReaderStepsApart
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(examples),
        eval_dataset=Dataset.from_list(heldout_examples) if evaluating else None,
        processing_class=tokenizer,
        callbacks=[LogToJsonl(), guard, *([stopping] if stopping else [])],
    )
    result = trainer.train()
    if stopping is not None:
        if stopping.record.stopped_at is None:  # the last steps since the last evaluation are judged too
            last = stopping.record.evaluations[-1].step if stopping.record.evaluations else -1
            if last != trainer.state.global_step:
                trainer.evaluate()
        stopping.restore_best()
    loss_after = assistant_loss(model, probe)
    exported: dict[str, str] = {}
    if dist.is_main_process:
        exported = checkpoint.export(
            trainer.accelerator.unwrap_model(trainer.model),
            tokenizer,
            run_dir / "final",
            merge_base(config.model),
            config.checkpoint,
        )
    metrics.close()
    summary = {
        "source": s.source,
        "transcripts": len(records),
        "correct": sum(r["correct"] for r in records),
        "ungrounded": dropped["ungrounded"],
        "too_long": dropped["too_long"],
        "turn_budget": config.rollout.max_new_tokens,
        "over_budget": dropped["over_budget"],
        "longest_turn": dropped["longest_turn"],
        "trained_on": transcript_examples,
        "heldout_transcripts": len(heldout_examples),
        "reader_examples": len(examples) - transcript_examples,
        "reader_batches": s.reader_batches,
        "rows": s.rows,
        "reader_reply_budget": config.rollout.sub_max_new_tokens,
        "reader_over_budget": reader_over_budget,
        "reader_echo": s.reader_echo,
        "reader_echoes": reader_echoes(config, run_dir),
        "transcripts_with_echo": sum(r.get("echo_checks", 0) > 0 for r in trained),
        "teacher_slips": s.teacher_slips,
        "slip_turns": sum(len(r.get("slip_turns", ())) for r in trained),
        "assistant_tokens": sum(sum(e["assistant_masks"]) for e in examples),
        "collect_s": round(collect_s, 2),
        "train_loss": result.training_loss,
        "assistant_loss_before": loss_before,
        "assistant_loss_after": loss_after,
        "heldout_loss_after": assistant_loss(model, heldout_examples[:LOSS_PROBE]) if evaluating else None,
        "stopping": stopping.record.summary() if stopping else None,
        "skipped_nonfinite_steps": guard.skipped,
        "exported": exported,
    }
    if dist.is_main_process:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if config is None:  # --print-config
        return 0
    summary = run_sft(config)
    print(json.dumps(summary, indent=2))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sft",
        help="SFT warm start on expert or teacher REPL transcripts (assistant tokens only)",
        description=__doc__.split("\n\n")[0],
    )
    add_config_arguments(parser, default_run_dir="runs/sft")
    parser.set_defaults(func=main)
