"""`fathom eval`: run a policy on a task file and write eval.jsonl + summary.json (resumable).

    fathom eval --policy expert --tasks data/heldout.jsonl --out runs/x/eval/expert
    fathom eval --policy teacher --tasks data/heldout_unseen.jsonl --out runs/x/eval/teacher-unseen
    fathom eval --policy rlm --model M --tasks data/heldout.jsonl data/heldout_unseen.jsonl \\
                --out runs/x/eval/rlm runs/x/eval/rlm-unseen          # one model load for both files
    fathom eval --policy direct --model tiny-smol --tasks data/heldout.jsonl --out runs/x/eval/direct
    fathom eval --policy rlm --model tiny-smol --tasks data/heldout.jsonl --out runs/x/eval/rlm-base
    fathom eval --policy rlm --model runs/x/checkpoints/final --label trained --context-tokens 2048 \\
                --tasks data/heldout.jsonl --out runs/x/eval/rlm-trained
    fathom eval --policy rlm --model runs/x/final/merged --reader-model smollm2-135m \\
                --tasks data/heldout.jsonl --out runs/x/eval/rlm-br   # the untrained model reads llm() calls
    fathom eval --policy teacher --reader-model qwen2.5-coder-1.5b --tasks data/heldout_unseen.jsonl \\
                --out runs/x/eval/teacher-br-unseen   # the teacher's moves, a model reading its llm() calls

Rerunning the same command after an interruption continues where it stopped. This module parses
arguments, builds the policy and prints the summary table; the loop is `fathom.eval.runner`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fathom.rollout.backends import MODES
from fathom.server.cli import positive

POLICIES = ("expert", "teacher", "direct", "rlm")


def build_policy(args: argparse.Namespace) -> Any:
    """The policy the arguments ask for (imports torch and transformers)."""
    from fathom.eval.policies import DirectPolicy, ExpertPolicy, RLMPolicy, TeacherPolicy
    from fathom.policies.excerpts import CHUNK_CHARS
    from fathom.rollout import Sampling

    if args.reader_model and args.policy not in ("rlm", "teacher"):
        raise SystemExit(
            "fathom eval: error: --reader-model is for --policy rlm or teacher (who answers their llm() calls)"
        )
    if args.policy == "expert":
        return ExpertPolicy(tokenizer_name=args.model or "tiny-smol", max_turns=args.max_turns or 12)
    if args.policy == "teacher":
        if args.repetition_penalty != 1.0 and not args.reader_model:
            raise SystemExit(
                "fathom eval: error: --repetition-penalty for --policy teacher is its --reader-model's "
                "(its own reader, the task layer's solver, samples nothing)"
            )
        return TeacherPolicy(
            tokenizer_name=args.model or args.reader_model or "tiny-smol",
            max_turns=args.max_turns or 12,
            **({"sub_max_input_tokens": args.sub_max_input_tokens} if args.sub_max_input_tokens else {}),
            reader_model=args.reader_model,
            dtype=args.dtype,
            device=args.device,
            generation_mode=args.generation_mode,
            vllm_memory=args.vllm_memory,
            vllm_kv_cache_gib=args.vllm_kv_cache_gib,
            step_timeout_s=args.step_timeout,
            chunk_size=args.teacher_chunk_chars or CHUNK_CHARS,
            label=args.label,
            repetition_penalty=args.repetition_penalty,
        )
    if args.teacher_chunk_chars:
        raise SystemExit("fathom eval: error: --teacher-chunk-chars is for --policy teacher")
    model = args.model or "tiny-smol"
    default_new = 128 if args.policy == "direct" else 256
    sampling = Sampling(
        max_new_tokens=args.max_new_tokens or default_new,
        temperature=args.temperature,
        repetition_penalty=args.repetition_penalty,
    )
    common = {
        "context_tokens": args.context_tokens,
        "sampling": sampling,
        "dtype": args.dtype,
        "device": args.device,
        "label": args.label,
        "generation_mode": args.generation_mode,
        "vllm_memory": args.vllm_memory,
        "vllm_kv_cache_gib": args.vllm_kv_cache_gib,
    }
    if args.policy == "direct":
        return DirectPolicy(model, **common)
    return RLMPolicy(
        model,
        max_turns=args.max_turns or 6,
        sub_max_input_tokens=args.sub_max_input_tokens,
        reader_model=args.reader_model,
        step_timeout_s=args.step_timeout,
        **common,
    )


def summary_table(summary: dict[str, Any]) -> Table:
    """Accuracy with its 95% Wilson interval, reward, tokens, cost, sub-calls and turns per group."""
    context = summary.get("context_tokens")
    title = f"{summary.get('label')} on {summary.get('n_rows')} tasks" + (
        f", context {context:,} tokens" if context else ""
    )
    table = Table(title=title)
    for col in ("group", "n", "acc", "95% CI", "reward", "tokens", "cost", "llm()", "turns"):
        table.add_column(col, justify="left" if col == "group" else "right")
    names = list(summary["groups"])
    kinds = [n.split("/")[0] for n in names]
    for i, name in enumerate(names):
        s = summary["groups"][name]
        table.add_row(
            name.split("/", 1)[-1],
            str(s["n"]),
            f"{s['accuracy']:.0%}",
            f"{s['ci_low']:.0%}-{s['ci_high']:.0%}",
            f"{s.get('reward', 0):.2f}",
            f"{s.get('tokens', 0):,.0f}",
            f"{s.get('cost_tokens', 0):,.0f}",
            f"{s.get('llm_calls', 0):.1f}",
            f"{s.get('turns', 0):.1f}",
            end_section=i + 1 < len(names) and kinds[i + 1] != kinds[i],
        )
    return table


def run(args: argparse.Namespace) -> int:
    from fathom.eval.runner import run_eval
    from fathom.tasks import load_tasks

    if len(args.tasks) != len(args.out):
        raise SystemExit(
            f"fathom eval: error: {len(args.tasks)} --tasks file(s) but {len(args.out)} --out folder(s): "
            "give one output folder per task file"
        )
    splits = []
    for path in args.tasks:  # every file is read before the model loads: a bad one fails at once
        tasks = load_tasks(path)
        splits.append(tasks[: args.limit] if args.limit is not None else tasks)
    console = Console()
    policy = build_policy(args)  # one model (one vLLM engine) for every task file
    for path, out, tasks in zip(args.tasks, args.out, splits, strict=True):
        console.print(f"[bold]fathom eval[/] {policy.label} on {len(tasks)} tasks from {path} -> {out}")
        summary = run_eval(
            policy,
            tasks,
            out,
            batch_size=args.batch_size,
            task_file=str(path),
            progress=not args.no_progress,
            overwrite=args.overwrite,
        )
        if summary["groups"]:
            console.print(summary_table(summary))
        console.print(f"results: {Path(out) / 'eval.jsonl'}, {Path(out) / 'summary.json'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="evaluate a policy on a task file (resumable)")
    p.add_argument("--policy", choices=POLICIES, required=True)
    p.add_argument(
        "--tasks",
        type=Path,
        nargs="+",
        required=True,
        help="task file(s) (JSONL, the fathom task schema); several are evaluated by one loaded model",
    )
    p.add_argument(
        "--out",
        type=Path,
        nargs="+",
        required=True,
        help="output directory per task file (eval.jsonl, summary.json)",
    )
    p.add_argument(
        "--model",
        help="offline name (tiny-smol, tiny-qwen, smollm2-135m), hub id, model or LoRA adapter directory "
        "(default tiny-smol; for expert and teacher, only its tokenizer is used)",
    )
    p.add_argument(
        "--reader-model",
        help="a second model (same tokenizer) answers the policy's llm() calls: for rlm, e.g. the untrained "
        "model beside its fine-tune (default: the policy reads its own calls); for teacher, in place of the "
        "task layer's solver (its tokenizer is the reader's unless --model names one)",
    )
    p.add_argument("--label", help="name in tables and plots (default policy:model)")
    p.add_argument(
        "--context-tokens",
        type=int,
        help="context window assumed for the model (default: 2048 for tiny-*, 8192 for smollm2-135m, "
        "else the checkpoint's max_position_embeddings)",
    )
    p.add_argument("--max-new-tokens", type=int, help="per reply (default 128 direct, 256 per rlm turn)")
    p.add_argument(
        "--max-turns", type=int, help="rlm/expert/teacher turn cap (default 6 rlm, 12 expert and teacher)"
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument(
        "--step-timeout",
        type=positive(float),
        default=60.0,
        metavar="S",
        help="rlm/teacher: wall-clock limit of one turn, its cells and llm() calls together (default 60; "
        "a model reading llm() calls on a CPU may need more)",
    )
    p.add_argument(
        "--sub-max-input-tokens",
        type=int,
        help="what the policy's own reader is shown of an llm() call, in tokens, as training's "
        "rollout.sub_max_input_tokens (rlm default: the window less the reply; teacher: its reader sees as "
        "much, default 4096: the view its chunks are cut for)",
    )
    p.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        help="CTRL-style penalty on tokens already in the prompt or reply, as HF generate's and vLLM's "
        "repetition_penalty (1.0 = off, default; > 1 discourages repeats); rlm's llm() sub-calls get it "
        "too, so every reply of the model is decoded the same way; for teacher, its --reader-model's replies",
    )
    p.add_argument(
        "--teacher-chunk-chars",
        type=positive(int),
        metavar="N",
        help="teacher: the most characters its reading cells hand one llm() call (default 7,680: what a "
        "4,096-token reader view holds whole of dense text)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="tasks per batch, and per resume step")
    p.add_argument("--limit", type=int, help="only the first N tasks of the file")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument(
        "--generation-mode",
        default="auto",
        choices=("auto", "vllm", *MODES),
        help="generation path: auto = vLLM on a GPU where it is installed, else HF generate (plain); "
        "vllm; plain; static (transformers' static KV cache)",
    )
    p.add_argument(
        "--vllm-memory",
        type=float,
        default=0.3,
        help="with vLLM: the engine's share of the GPU's memory (default 0.3; lower it to share the GPU)",
    )
    p.add_argument(
        "--vllm-kv-cache-gib",
        type=float,
        default=0.0,
        help="with vLLM: a KV cache of this many GiB, without vLLM's start-up memory profile (which aborts "
        "when another process on the GPU frees memory meanwhile); default 0: profiled",
    )
    p.add_argument("--device", help="cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--overwrite", action="store_true", help="discard earlier results in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
