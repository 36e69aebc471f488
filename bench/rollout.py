"""Rollout throughput, each figure against a baseline measured in the same run.

CPU (default): the rollout engine (all episodes' turns in one batch, cells concurrent) vs a naive loop (one
episode at a time, plain `generate`), both with the tiny model on real tasks and real sandboxes:

    .venv/bin/python bench/rollout.py --episodes 16

GPU: plain HF `generate` vs transformers' static-cache path (`HFBackend(mode="static")`) vs ours
(`HFBackend(mode="graph")`: static KV cache with the whole decode step captured as one CUDA graph per batch
bucket) on real RLM prompts, at batch 64 and 256, with the memory-bandwidth floor of one decode step
(weights + the KV cache read once, over the copy bandwidth measured in this run):

    python bench/rollout.py --gpu --model /root/smol --batches 64 256 --new-tokens 256

Each static shape is compiled once (warm-up, not timed) and then timed twice; a recompile inside the timed
calls would show as a slow repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

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


def gpu_bench(model_path: str, batches: list[int], new_tokens: int, paths: list[str]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fathom.rollout.backends import HFBackend, Sampling
    from fathom.rollout.chat import ChatFormat

    tok = AutoTokenizer.from_pretrained(model_path)
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
    print(f"GPU {torch.cuda.get_device_name()}, {model_path} ({params / 1e6:.1f}M params, bf16), "
          f"prompt {prompt_len} tokens, {new_tokens} new tokens; copy bandwidth {bandwidth / 1e12:.2f} TB/s")  # fmt: skip
    plain = HFBackend(model, tok, mode="plain")
    static = HFBackend(model, tok, mode="static", max_cache_len=1024)
    graph = HFBackend(model, tok, mode="graph", max_cache_len=1024, graph_max_new=new_tokens)
    fused = HFBackend(model, tok, mode="graph", max_cache_len=1024, graph_max_new=new_tokens, fuse=True)
    backends = {"plain": plain, "static": static, "graph": graph, "fused": fused}
    print(
        f"{'batch':>5} {'path':>7} {'tok/s':>10} {'ms/step':>8} {'floor ms':>8} {'x plain':>8} {'run s':>14}"
    )
    for batch in batches:
        # floor: read the weights and, on average, half the final KV cache once per step
        kv_bytes = batch * (prompt_len + new_tokens / 2) * kv_per_token
        floor_ms = (params * 2 + kv_bytes) / (bandwidth / 2) * 1000  # copy bw counts read+write
        results = {}
        for name in paths:
            backend = backends[name]
            warm = time.perf_counter()
            backend.generate(prompts[:batch], sampling)  # warm-up (compiles the static shape)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--paths", nargs="+", default=["plain", "static", "graph", "fused"])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    if args.gpu:
        if args.paths[0] != "plain":
            parser.error("--paths must start with plain (the baseline the others are compared with)")
        gpu_bench(args.model, args.batches, args.new_tokens, args.paths)
    else:
        cpu_bench(args.episodes, args.turns, 32)


if __name__ == "__main__":
    main()
