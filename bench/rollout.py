"""Rollout engine throughput on CPU, each figure against baselines measured in the same run.

The tiny model on real tasks and real sandboxes, three ways over the same episodes: a naive loop (one episode
at a time), turn-synchronous batches (``RolloutConfig.sync_turns``: every live episode's turn generated
together, the engine before issue #14), and the engine as it runs now (each episode's turns and sub-calls sent
the moment they are ready). One episode in four runs a slow first cell, as real model code does, so waiting for
the slowest episode shows:

    .venv/bin/python bench/rollout.py --episodes 16

The GPU figures (vLLM against plain generate, continuous against turn-synchronous batches, GRPO steps) are
`bench/gpu_rollouts.py` and `scripts/gpu/rollouts.sh`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--slow-cell-s", type=float, default=0.5)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fathom.models import tiny_model_dir
    from fathom.rollout import ChatFormat, HFBackend, RolloutConfig, Sampling
    from fathom.rollout.wiring import build_engine, hf_service
    from fathom.tasks import generate_task

    torch.set_num_threads(2)
    path = tiny_model_dir("tiny-smol")
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    chat = ChatFormat(tok)
    tasks = [generate_task("niah", s, 8192) for s in range(args.episodes)]
    slow = {t.question for t in tasks[::4]}

    class SlowFirstCell:
        """The tiny model's own sampled turn, with a slow cell in front of one episode in four's first turn."""

        def __init__(self) -> None:
            self.inner = HFBackend(model, tok)

        def generate(self, prompts, sampling):
            gens = self.inner.generate(prompts, sampling)
            out = []
            for prompt, gen in zip(prompts, gens, strict=True):
                text = tok.decode(prompt)
                if "[turn " not in text and any(q in text for q in slow):
                    cell = f"```repl\nimport time\ntime.sleep({args.slow_cell_s})\n```\n"
                    gen = type(gen)(tok.encode(cell, add_special_tokens=False) + gen.ids, gen.finished, None)
                out.append(gen)
            return out

    rows = []
    for name, groups, sync in (
        ("naive loop (1 episode at a time)", [[t] for t in tasks], False),
        ("turn-synchronous batches", [tasks], True),
        ("engine (continuous)", [tasks], False),
    ):
        config = RolloutConfig(
            max_turns=args.turns,
            max_total_tokens=10_000,
            sampling=Sampling(args.new_tokens, ignore_eos=True),
            sync_turns=sync,
        )
        started = time.perf_counter()
        episodes = []
        for group in groups:
            episodes += build_engine(hf_service(SlowFirstCell()), chat, config, None).run_sync(group)
        wall = time.perf_counter() - started
        tokens = sum(e.model_tokens for e in episodes)
        rows.append((name, wall, tokens / wall, len(episodes) / wall))
    print(
        f"CPU, tiny-smol, {args.episodes} niah-8K episodes x {args.turns} turns x {args.new_tokens} tokens, "
        f"a {args.slow_cell_s} s first cell in one episode of four"
    )
    print(f"{'path':34} {'wall s':>8} {'model tok/s':>12} {'episodes/s':>11}")
    for name, wall, tps, eps in rows:
        print(f"{name:34} {wall:8.2f} {tps:12.1f} {eps:11.3f}")
    print(
        f"engine / naive: {rows[2][2] / rows[0][2]:.1f}x tokens/s; engine / turn-synchronous: {rows[2][2] / rows[1][2]:.2f}x"
    )


if __name__ == "__main__":
    main()
