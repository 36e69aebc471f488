"""GRPO on FATHOM episodes with TRL's own tool loop: `GRPOTrainer(environment_factory=...)`.

    python examples/trl_grpo.py --smoke                                        # one step on CPU, ~minutes
    python examples/trl_grpo.py --tasks data/train.jsonl --model Qwen/Qwen2.5-0.5B-Instruct
    fathom serve --tasks data/train.jsonl --token-file tok --sub-lm expert &    # or episodes on a server:
    python examples/trl_grpo.py --tasks data/train.jsonl --model ... --server http://127.0.0.1:8000 --token-file tok

`--smoke` needs no model hub and no task file: it makes one niah task, fits the tiny tool-calling model of
`tiny_tool_model.py` to it (a few hundred CPU steps, cached in `--out`), and runs one GRPO step whose
rollouts really call the `python` tool; with `--server` the episodes run on that `fathom serve` (rows carry
the task inline, so any server will do). It prints TRL's logged metrics and each rollout's end.

Otherwise the model must be a chat model whose template renders tools and that TRL can parse tool calls for
(Qwen2.5/Qwen3, Llama 3.1/3.2, ...); without --model this runs the random `tiny-qwen` model with the
Qwen2.5 template, which calls no tool. FATHOM's own trainer (`fathom grpo`) keeps more of the episode; see
"Use FATHOM from your trainer" in the README.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen2_5_chat_template

from fathom.env import EnvConfig
from fathom.integrations.trl import in_process_factory, remote_factory, trl_dataset
from fathom.models.offline import tiny_model_dir
from fathom.server.cli import load_sub_lm
from fathom.tasks import generate_task

SMOKE_ROLLOUTS = 8


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="one step of the fitted tiny tool model on one task")
    p.add_argument("--tasks", type=Path, help="a FATHOM task file (fathom data build); not with --smoke")
    p.add_argument("--model", help="HF model name or path (default: the random tiny-qwen)")
    p.add_argument("--server", help="URL of a running `fathom serve` (default: episodes in-process)")
    p.add_argument("--token-file", type=Path, help="the server's bearer token")
    p.add_argument("--sub-lm", default="expert", help="in-process only: who answers llm() (see fathom serve)")
    p.add_argument("--max-turns", type=int, default=6, help="the episode's turn cap (tool calls that run)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("runs/trl-grpo"))
    args = p.parse_args()
    if args.smoke == (args.tasks is not None):
        p.error("give exactly one of --smoke and --tasks")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    token = args.token_file.read_text().strip() if args.token_file else None

    if args.smoke:
        from tiny_tool_model import SYSTEM, tool_model, tool_tokenizer

        task = generate_task("niah", 3, 2048)
        fitted = tool_model(task, args.out / "tiny-tool-model")
        print(f"tiny tool model: {fitted.steps} fitting steps, cells {fitted.cells} -> {fitted.answers}")
        model_path, tokenizer = fitted.path, tool_tokenizer(fitted.path)
        dataset = trl_dataset([task], inline=True, system=SYSTEM)
        factory = remote_factory(args.server, token=token) if args.server else in_process_factory()
        rollouts, steps, turns = SMOKE_ROLLOUTS, 1, 2
        extra = {"max_completion_length": 192, "temperature": 0.7, "use_cpu": True, "seed": 0}
    else:
        model_path = args.model or tiny_model_dir("tiny-qwen")
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        if args.model is None:
            tokenizer.chat_template = (
                qwen2_5_chat_template  # the offline tokenizer's own template has no tools
            )
        dataset = trl_dataset(args.tasks)
        if args.server:
            factory = remote_factory(
                args.server, token=token, tasks=args.tasks
            )  # the server's config applies
        else:
            config = EnvConfig(max_iterations=args.max_turns)
            factory = in_process_factory(tasks=args.tasks, config=config, sub_lm=load_sub_lm(args.sub_lm))
        rollouts, steps, turns = 4, args.steps, args.max_turns
        extra = {"max_completion_length": 512}  # the whole episode: model turns and tool results together

    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_path),
        processing_class=tokenizer,
        args=GRPOConfig(
            output_dir=str(args.out),
            max_steps=steps,
            per_device_train_batch_size=rollouts,
            num_generations=rollouts,
            max_tool_calling_iterations=turns,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            **extra,
        ),
        train_dataset=dataset,
        environment_factory=factory,
    )
    trainer.train()
    for logs in trainer.state.log_history:
        shown = (
            "tools/call_frequency",
            "tools/failure_frequency",
            "rewards/FathomEnv/mean",
            "rewards/FathomEnv/std",
        )
        print({k: logs[k] for k in (*shown, "step_time", "train_runtime") if k in logs})
    for env in trainer.environments:  # the last batch's episodes: how each ended and what it earned
        breakdown = env.reward_breakdown or {}
        answer = env.observations[-1].answer
        print(env.task.id, env.end_reason, repr(answer), breakdown.get("total"), breakdown.get("components"))


if __name__ == "__main__":
    main()
