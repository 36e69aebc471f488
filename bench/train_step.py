"""Wall time of one GRPO step, split into generation, environment and optimisation; tokens/s; peak memory.

Runs a short real GRPO job (`fathom.train.grpo.build_grpo`: the rollout engine with real sandboxes inside
TRL's loop) and reads the per-step timings the trainer logs (`time/*` in metrics.jsonl):

- generation: the time spent in the policy's `generate` calls (turns and `llm()` sub-calls);
- environment: the rest of the rollout (sandbox start, cells, sub-call plumbing, reward);
- optimisation: the rest of the step (TRL's scoring, loss, backward, optimizer step, logging, checkpoint).

Step 1 includes warm-up (first generate, kernel selection) and is reported apart from the mean of the rest.
Tokens/s counts every token the loss saw (prompt + completion, TRL's ``num_tokens``) and the sampled
(trained) tokens. Peak memory: this process's max RSS (the sandbox workers are separate processes, budgeted
in bench/RESULTS.md's sandbox section) and, on CUDA, the allocator's peak allocated and reserved bytes. The model-FLOPs rate is 6·N·T over the
optimisation time (N parameters, T tokens the loss saw), an upper-bound convention.

    .venv/bin/python bench/train_step.py                                   # CPU, tiny model
    python bench/train_step.py --device cuda --model /root/smol --groups 8 --generations 8 \\
        --max-new-tokens 256 --max-turns 4 --steps 4                       # GPU, SmolLM2-135M

The GPU machine needs trl, datasets, pydantic and openenv wheels carried in (see the lead's staging notes).
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument(
        "--model",
        default=None,
        help="offline name or local path (default: tiny-smol on CPU, smollm2-135m on CUDA)",
    )
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--groups", type=int, default=2, help="GRPO groups (tasks) per step")
    p.add_argument("--generations", type=int, default=4, help="rollouts per group")
    p.add_argument("--max-turns", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--max-total-tokens", type=int, default=1024)
    p.add_argument("--length", type=int, default=8192, help="document length in tokens")
    p.add_argument(
        "--generation-mode",
        default="auto",
        help="auto = plain generate; graph = the CUDA-graph decoder (opt-in, bench/RESULTS.md)",
    )
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="accelerator peak for an MFU figure (H200 bf16 dense: 989)",
    )
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("extra", nargs="*", help="more config overrides: section.key=value")
    return p.parse_args()


def main() -> None:
    args = parse()
    import torch

    from fathom.train.configfile import load_config
    from fathom.train.grpo import build_grpo
    from fathom.train.runlog import read_jsonl

    model = args.model or ("tiny-smol" if args.device == "cpu" else "smollm2-135m")
    batch = args.groups * args.generations
    run_dir = Path(tempfile.mkdtemp(prefix="fathom-bench-"))
    overrides = [
        f"--run.run_dir={run_dir}",
        f"--run.device={args.device}",
        f"--model.name={model}",
        f"--grpo.max_steps={args.steps}",
        f"--grpo.num_generations={args.generations}",
        f"--grpo.per_device_train_batch_size={batch}",
        "--grpo.gradient_accumulation_steps=1",
        f"--rollout.max_turns={args.max_turns}",
        f"--rollout.max_new_tokens={args.max_new_tokens}",
        f"--rollout.max_total_tokens={args.max_total_tokens}",
        f"--rollout.generation_mode={args.generation_mode}",
        f'--curriculum.tiers=[{{name="bench", lengths=[{args.length}], families=["niah", "vartrack", "keychain", "multikey"]}}]',
        "--eval.every=0",
        "--checkpoint.geometric=false",
        "--checkpoint.save_every=0",
        "--logging.progress=false",
        "--logging.traces=false",
        *(f"--{e}" for e in args.extra),
    ]
    config = load_config(CONFIGS / "tiny-cpu.toml", overrides)
    run = build_grpo(config)
    params = sum(p.numel() for p in run.trainer.model.parameters())
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    run.trainer.train()
    wall = time.perf_counter() - started

    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]
    tokens = [rows[0]["num_tokens"]] + [
        b["num_tokens"] - a["num_tokens"] for a, b in itertools.pairwise(rows)
    ]
    per_step = []
    for row, seen in zip(rows, tokens, strict=True):
        sampled = row["behaviour/model_tokens"] * batch
        per_step.append(
            {
                "step": row["step"],
                "step_s": row["time/step_s"],
                "generate_s": row["time/generate_s"],
                "env_s": row["time/env_s"],
                "optimise_s": row["time/optimise_s"],
                "loss_tokens": seen,
                "sampled_tokens": sampled,
                "loss_tokens_per_s": seen / row["time/step_s"],
                "sampled_tokens_per_s": sampled / row["time/step_s"],
                "model_tflops_per_s": 6 * params * seen / row["time/optimise_s"] / 1e12,
            }
        )
    rest = per_step[1:] or per_step
    mean = {k: statistics.mean(s[k] for s in rest) for k in per_step[0] if k != "step"}
    memory = {"host_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if args.device == "cuda":
        memory["gpu_peak_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
        memory["gpu_peak_reserved_mib"] = torch.cuda.max_memory_reserved() / 2**20
    report = {
        "device": torch.cuda.get_device_name()
        if args.device == "cuda"
        else f"cpu x{torch.get_num_threads()} threads",
        "model": model,
        "parameters": params,
        "trainable": sum(p.numel() for p in run.trainer.model.parameters() if p.requires_grad),
        "rollouts_per_step": batch,
        "steps": args.steps,
        "train_wall_s": wall,
        "per_step": per_step,
        "mean_after_step_1": mean,
        "memory": memory,
    }
    if args.peak_tflops:
        report["mfu"] = mean["model_tflops_per_s"] / args.peak_tflops

    print(
        f"{report['device']}, {model} ({params / 1e6:.1f}M params, {report['trainable'] / 1e6:.2f}M trainable), "
        f"{batch} rollouts/step ({args.groups} groups x {args.generations}), {args.max_turns} turns x "
        f"{args.max_new_tokens} new tokens, {args.length}-token documents"
    )
    header = f"{'step':>4} {'step s':>8} {'gen s':>8} {'env s':>8} {'optim s':>8} {'loss tok/s':>11} {'sampled tok/s':>14} {'6NT TFLOP/s':>12}"
    print(header)
    for s in per_step:
        print(
            f"{s['step']:>4} {s['step_s']:8.2f} {s['generate_s']:8.2f} {s['env_s']:8.2f} {s['optimise_s']:8.2f} "
            f"{s['loss_tokens_per_s']:11.0f} {s['sampled_tokens_per_s']:14.1f} {s['model_tflops_per_s']:12.4f}"
        )
    m = mean
    print(
        f"mean {m['step_s']:8.2f} {m['generate_s']:8.2f} {m['env_s']:8.2f} {m['optimise_s']:8.2f} "
        f"{m['loss_tokens_per_s']:11.0f} {m['sampled_tokens_per_s']:14.1f} {m['model_tflops_per_s']:12.4f}   (steps 2..)"
    )
    share = {k: m[k] / m["step_s"] for k in ("generate_s", "env_s", "optimise_s")}
    print("share of a step: " + ", ".join(f"{k[:-2]} {v:.0%}" for k, v in share.items()))
    print("memory: " + ", ".join(f"{k} {v:,.0f}" for k, v in memory.items()))
    if "mfu" in report:
        print(f"MFU (6NT / optimisation time / {args.peak_tflops} TFLOP/s): {report['mfu']:.2%}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
