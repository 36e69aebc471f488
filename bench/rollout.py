"""Rollout throughput, each figure against a baseline measured in the same run.

CPU (default): the rollout engine (all episodes' turns in one batch, cells concurrent) vs a naive loop (one
episode at a time, plain `generate`), both with the tiny model on real tasks and real sandboxes:

    .venv/bin/python bench/rollout.py --episodes 16

GPU: plain HF `generate` vs transformers' static-cache path (`HFBackend(mode="static")`) vs ours
(`HFBackend(mode="graph")`: static KV cache with the whole decode step captured as one CUDA graph per batch
bucket) on real RLM prompts, at batch 64 and 256, with the memory-bandwidth floor of one decode step
(weights + the KV cache read once, over the copy bandwidth measured in this run):

    python bench/rollout.py --gpu --model /root/smol --batches 64 256 --new-tokens 256

As GRPO generates (`--grpo`): the model in bf16 with the recipe's LoRA adapter (r=32), prepared by accelerate
with bf16 mixed precision (its autocast-wrapped forward) and called under the trainer's autocast; paths
plain / lean (our decode loop, uncaptured) / graph. Each path's greedy log-probs are also checked against
one eager forward of the same model over prompt + output (max |difference| over 4 prompts x 32 tokens):

    python bench/rollout.py --gpu --grpo --model "$M" --batches 32 --new-tokens 256 --paths plain lean graph

(graph now refuses a PEFT model: its captured log-probs were wrong on the H200, RESULTS.md; the refusal is
printed as that path's row.)

Each static shape is compiled once (warm-up, not timed) and then timed twice; a recompile inside the timed
calls would show as a slow repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def cpu_bench(episodes: int, turns: int, new_tokens: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fathom.env import EnvConfig, RLMEnvironment
    from fathom.models import tiny_model_dir
    from fathom.rollout import ChatFormat, HFBackend, RolloutConfig, RolloutEngine, Sampling
    from fathom.tasks import generate_task

    torch.set_num_threads(2)
    path = tiny_model_dir("tiny-smol")
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    chat = ChatFormat(tok)
    config = RolloutConfig(
        max_turns=turns, max_total_tokens=10_000, sampling=Sampling(new_tokens, ignore_eos=True)
    )
    tasks = [generate_task("niah", s, 8192) for s in range(episodes)]

    def engine() -> RolloutEngine:
        return RolloutEngine(
            HFBackend(model, tok), chat, lambda: RLMEnvironment(EnvConfig(max_iterations=turns)), config
        )

    rows = []
    for name, groups in (
        ("naive loop (1 episode at a time)", [[t] for t in tasks]),
        ("rollout engine", [tasks]),
    ):
        started = time.perf_counter()
        rollouts = [r for group in groups for r in engine().run_sync(group)]
        wall = time.perf_counter() - started
        tokens = sum(sum(r.env_mask) for r in rollouts)
        rows.append((name, wall, tokens / wall, len(rollouts) / wall))
    print(
        f"CPU, tiny-smol (2 layers, vocab 49,152), {episodes} niah-8K episodes x {turns} turns x {new_tokens} tokens"
    )
    print(f"{'path':34} {'wall s':>8} {'model tok/s':>12} {'episodes/s':>11}")
    for name, wall, tps, eps in rows:
        print(f"{name:34} {wall:8.2f} {tps:12.1f} {eps:11.3f}")
    print(f"engine / naive: {rows[1][2] / rows[0][2]:.1f}x tokens/s")


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written), median of 10."""
    import torch

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return 2 * src.numel() / statistics.median(times[2:])


def max_logprob_error(model: Any, backend: Any, prompts: list[list[int]], tokens: int = 32) -> float:
    """Greedy-decode `tokens` tokens of 4 prompts with `backend`; the largest |log-prob - eager forward's|."""
    import torch

    from fathom.rollout.backends import Sampling

    gens = backend.generate(prompts[:4], Sampling(max_new_tokens=tokens, temperature=0, logprobs=True))
    worst = 0.0
    for prompt, gen in zip(prompts, gens, strict=False):
        ids = torch.tensor([prompt + gen.ids], device="cuda")
        with torch.no_grad():
            logp = model(input_ids=ids).logits.float().log_softmax(-1)[0]
        rows = logp[len(prompt) - 1 : len(prompt) - 1 + len(gen.ids)]
        eager = rows.gather(-1, torch.tensor(gen.ids, device="cuda")[:, None])[:, 0]
        worst = max(worst, (eager.cpu() - torch.tensor(gen.logprobs)).abs().max().item())
    return worst


def grpo_model(model_path: str) -> tuple[Any, Any, Any]:
    """The model as GRPO holds it: bf16 weights, LoRA r=32 (fp32 adapter), accelerate-prepared (bf16)."""
    import torch
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16).cuda()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, lora_dropout=0.0, target_modules=targets))
    with torch.no_grad():  # a trained adapter, not PEFT's zero-initialised no-op
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.01)
    accelerator = Accelerator(mixed_precision="bf16")
    return accelerator.prepare(model).eval(), accelerator, model


def gpu_bench(
    model_path: str, batches: list[int], new_tokens: int, paths: list[str], grpo: bool = False
) -> None:
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fathom.rollout.backends import HFBackend, Sampling
    from fathom.rollout.chat import ChatFormat

    tok = AutoTokenizer.from_pretrained(model_path)
    autocast: Any = contextlib.nullcontext
    if grpo:
        model, accelerator, _ = grpo_model(model_path)
        autocast = accelerator.autocast
    else:
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16).cuda().eval()
    chat = ChatFormat(tok)
    system = "You answer questions about a document stored in the Python variable `ctx`. " * 6
    prompts = [
        chat.prompt_ids(system, f"Question {i}: what is the magic number for key-{i}?")
        for i in range(max(batches))
    ]
    sampling = Sampling(max_new_tokens=new_tokens, temperature=1.0, ignore_eos=True)
    bandwidth = copy_bandwidth()
    params = sum(p.numel() for p in model.parameters())
    cfg = model.config
    kv_per_token = (
        2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads) * 2
    )
    prompt_len = max(len(p) for p in prompts)
    print(f"GPU {torch.cuda.get_device_name()}, {model_path} ({params / 1e6:.1f}M params, bf16"
          f"{', LoRA r=32, accelerate bf16 wrapper' if grpo else ''}), "
          f"prompt {prompt_len} tokens, {new_tokens} new tokens; copy bandwidth {bandwidth / 1e12:.2f} TB/s")  # fmt: skip
    cache = 1024
    backends = {
        "plain": HFBackend(model, tok, mode="plain"),
        "static": HFBackend(model, tok, mode="static", max_cache_len=cache),
        "lean": HFBackend(model, tok, mode="lean", max_cache_len=cache, graph_max_new=new_tokens),
        "graph": HFBackend(model, tok, mode="graph", max_cache_len=cache, graph_max_new=new_tokens),
        "fused": HFBackend(
            model, tok, mode="graph", max_cache_len=cache, graph_max_new=new_tokens, fuse=True
        ),
    }
    print(
        f"{'batch':>5} {'path':>7} {'tok/s':>10} {'ms/step':>8} {'floor ms':>8} {'x plain':>8} {'run s':>14}"
    )
    for batch in batches:
        # floor: read the weights and, on average, half the final KV cache once per step
        kv_bytes = batch * (prompt_len + new_tokens / 2) * kv_per_token
        floor_ms = (params * 2 + kv_bytes) / (bandwidth / 2) * 1000  # copy bw counts read+write
        results = {}
        for name in list(paths):
            backend = backends[name]
            with autocast():
                warm = time.perf_counter()
                try:
                    backend.generate(prompts[:batch], sampling)  # warm-up (compiles the static shape)
                except ValueError as exc:  # a path that refuses this model (graph + PEFT): say so, drop it
                    print(f"{batch:5d} {name:>7} refused: {exc}")
                    paths.remove(name)
                    continue
                torch.cuda.synchronize()
                warm_s = time.perf_counter() - warm
                runs = []
                for _ in range(2):
                    started = time.perf_counter()
                    out = backend.generate(prompts[:batch], sampling)
                    torch.cuda.synchronize()
                    runs.append(time.perf_counter() - started)
            tokens = sum(len(g.ids) for g in out)
            best = min(runs)
            results[name] = tokens / best
            ratio = results[name] / results["plain"]
            print(f"{batch:5d} {name:>7} {tokens / best:10.0f} {best / new_tokens * 1000:8.2f} {floor_ms:8.3f} "
                  f"{ratio:8.1f} {runs[0]:6.2f},{runs[1]:5.2f}  (warm-up {warm_s:.1f} s)")  # fmt: skip
    for name in ("graph", "fused"):
        if name in paths:
            print(
                f"{name} captures: {backends[name]._decoder.captures} (one per shape; none in the timed runs)"
            )
    print("max |log-prob - eager forward| (greedy, 4 prompts x 32 tokens, under the same autocast):")
    for name in paths:
        with autocast():
            print(f"  {name:>7} {max_logprob_error(model, backends[name], prompts, min(32, new_tokens)):.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--paths", nargs="+", default=["plain", "static", "graph", "fused"])
    parser.add_argument("--grpo", action="store_true", help="bf16 + LoRA + accelerate wrapper, as in GRPO")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    if args.gpu:
        if args.paths[0] != "plain":
            parser.error("--paths must start with plain (the baseline the others are compared with)")
        gpu_bench(args.model, args.batches, args.new_tokens, args.paths, grpo=args.grpo)
    else:
        cpu_bench(args.episodes, args.turns, 32)


if __name__ == "__main__":
    main()
