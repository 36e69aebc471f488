"""GRPO on FATHOM episodes with TRL's own tool loop: `GRPOTrainer(environment_factory=...)`.

    python examples/trl_grpo.py --tasks data/train.jsonl                       # episodes in this process
    fathom serve --tasks data/train.jsonl --token-file tok --sub-lm expert &    # or on a server:
    python examples/trl_grpo.py --tasks data/train.jsonl --server http://127.0.0.1:8000 --token-file tok

The model must be a chat model whose template renders tools and that TRL can parse tool calls for
(Qwen2.5/Qwen3, Llama 3.1/3.2, ...). Without --model this runs the random `tiny-qwen` model with the
Qwen2.5 template: a pipeline check that trains nothing useful. FATHOM's own trainer (`fathom grpo`) keeps
more of the episode; see "Use FATHOM from your trainer" in the README.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import qwen2_5_chat_template

from fathom.env import EnvConfig
from fathom.integrations.trl import in_process_factory, remote_factory, trl_dataset
from fathom.models.offline import tiny_model_dir
from fathom.server.cli import load_sub_lm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=Path, required=True, help="a FATHOM task file (fathom data build)")
    p.add_argument("--model", help="HF model name or path (default: the random tiny-qwen)")
    p.add_argument("--server", help="URL of a running `fathom serve` (default: episodes in-process)")
    p.add_argument("--token-file", type=Path, help="the server's bearer token")
    p.add_argument("--sub-lm", default="expert", help="in-process only: who answers llm() (see fathom serve)")
    p.add_argument("--max-turns", type=int, default=6, help="the episode's turn cap (tool calls that run)")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("runs/trl-grpo"))
    args = p.parse_args()

    model_path = args.model or tiny_model_dir("tiny-qwen")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if args.model is None:
        tokenizer.chat_template = qwen2_5_chat_template  # the offline tokenizer's own template has no tools
    if args.server:
        token = args.token_file.read_text().strip() if args.token_file else None
        factory = remote_factory(args.server, token=token, tasks=args.tasks)  # the server's config applies
    else:
        config = EnvConfig(max_iterations=args.max_turns)
        factory = in_process_factory(tasks=args.tasks, config=config, sub_lm=load_sub_lm(args.sub_lm))
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_path),
        processing_class=tokenizer,
        args=GRPOConfig(
            output_dir=str(args.out),
            max_steps=args.steps,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=512,  # the whole episode: model turns and tool results together
            max_tool_calling_iterations=args.max_turns,
            logging_steps=1,
            report_to="none",
        ),
        train_dataset=trl_dataset(args.tasks),
        environment_factory=factory,
    )
    trainer.train()
    for env in trainer.environments:  # the last batch's episodes: how each ended and what it earned
        breakdown = env.reward_breakdown or {}
        print(env.task.id, env.end_reason, breakdown.get("total"), breakdown.get("components"))


if __name__ == "__main__":
    main()
