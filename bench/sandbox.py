"""Sandbox benchmark: per-cell round trip, episode start, throughput under concurrency, idle memory.

    python bench/sandbox.py                 # auto isolation (bwrap here), about a minute on 2 cores
    python bench/sandbox.py --mode plain

Prints markdown tables with ratios against baselines measured in the same run:
  * per-cell round trip of the persistent worker vs a fresh process per cell (a fresh jailed worker with
    the same layers, and a bare `python3 -I -S -c` with no jail at all, the cheapest possible process);
  * episode start with and without the pool;
  * cells/s with 1, 8, 64 and 256 concurrent episodes (all alive at once, errors counted);
  * memory (PSS and RSS) per idle worker, pre-started and with a 1 MB document loaded.
Floors checked at the end: median per-cell overhead < 1 ms, >= 20x faster than a fresh process per cell,
256 concurrent live episodes without failures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

from fathom.sandbox import LLMRequest, Sandbox, SandboxConfig, SandboxPool

DOC = "".join(
    f"The ledger of the harbour master, page {i:06d}: arrivals, departures, tonnage, tolls.\n"
    for i in range(12_000)
)


async def echo(requests: list[LLMRequest]) -> list[str]:
    return [r.prompt for r in requests]


def quantiles(samples: list[float]) -> tuple[float, float]:
    """(median, p99) in ms."""
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3


async def timed(coro) -> float:
    t0 = time.perf_counter()
    await coro
    return time.perf_counter() - t0


async def per_cell(config: SandboxConfig, n: int) -> dict[str, tuple[float, float]]:
    rows = {}
    async with await Sandbox.start(None, config, echo, ctx_text=DOC) as sb:
        for name, code in [
            ("persistent worker: `x = 1`", "x = 1"),
            ("persistent worker: slice + print 1 KB", "print(ctx[5000:6000])"),
            ("persistent worker: one `llm()` (echo handler)", "r = llm('q', ctx[:100])"),
        ]:
            for _ in range(50):  # warm up
                await sb.execute(code)
            samples = [await timed(sb.execute(code)) for _ in range(n)]
            rows[name] = quantiles(samples)
    return rows


async def fresh_jailed(config: SandboxConfig, n: int) -> tuple[float, float]:
    """A fresh jailed worker per cell: spawn, load the document, run `x = 1`, kill."""

    async def one() -> None:
        sb = await Sandbox.start(None, config, ctx_text=DOC)
        await sb.execute("x = 1")
        await sb.close()

    return quantiles([await timed(one()) for _ in range(n)])


def fresh_bare(python: str, n: int) -> tuple[float, float]:
    """A bare `python3 -I -S -c 'x = 1'` per cell: no jail, no state, no document."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([python, "-I", "-S", "-c", "x = 1"], check=True)
        samples.append(time.perf_counter() - t0)
    return quantiles(samples)


async def episode_start(config: SandboxConfig, n: int) -> dict[str, tuple[float, float]]:
    """Time from asking for an episode to the first cell's result."""

    async def first_cell(start) -> float:
        t0 = time.perf_counter()
        sb = await start()
        await sb.execute("x = 1")
        elapsed = time.perf_counter() - t0
        await sb.close()
        return elapsed

    rows = {}
    standalone = [await first_cell(lambda: Sandbox.start(None, config, ctx_text=DOC)) for _ in range(n)]
    rows["without pool (`Sandbox.start`)"] = quantiles(standalone)
    async with SandboxPool(config, size=8, handle_signals=False) as pool:
        pooled = []
        for _ in range(n):
            await pool.wait_ready()  # steady state: a pre-started worker is waiting
            pooled.append(await first_cell(lambda: pool.start(None, ctx_text=DOC)))
        rows["with pool (a pre-started worker waiting)"] = quantiles(pooled)
        await pool.wait_ready()
        t0 = time.perf_counter()
        live = await asyncio.gather(*(pool.start(None, ctx_text=DOC) for _ in range(32)))
        per_episode = (time.perf_counter() - t0) / 32
        rows["with pool of 8, burst of 32 at once (wall / 32)"] = (per_episode * 1e3, float("nan"))
        await asyncio.gather(*(s.close() for s in live))
    return rows


async def concurrency(config: SandboxConfig, episodes: int, total_cells: int) -> dict:
    cells_each = max(10, total_cells // episodes)
    failures = 0
    async with SandboxPool(config, size=min(episodes, 16), handle_signals=False) as pool:
        live = await asyncio.gather(*(pool.start(None, echo, ctx_text=DOC) for _ in range(episodes)))
        pre_idle = [w for w in pool._ready]
        await asyncio.gather(*(s.execute("x = 0") for s in live))

        async def drive(sb: Sandbox) -> int:
            bad = 0
            for i in range(cells_each):
                r = await sb.execute(f"x += 1\nprint(ctx[{i * 100}:{i * 100 + 100}])")
                bad += r.error is not None or r.restarted
            return bad

        t0 = time.perf_counter()
        failures = sum(await asyncio.gather(*(drive(s) for s in live)))
        wall = time.perf_counter() - t0
        check = await asyncio.gather(*(s.execute("print(x)") for s in live))
        failures += sum(r.stdout != f"{cells_each}\n" for r in check)
        memory = (tree_memory([p for s in live for p in s.processes]), len(live))
        idle_memory = (tree_memory([p for w in pre_idle for p in w.pids]), len(pre_idle))
        await asyncio.gather(*(s.close() for s in live))
    return {
        "episodes": episodes,
        "cells": episodes * cells_each,
        "cells_per_s": episodes * cells_each / wall,
        "failures": failures,
        "memory": memory,
        "idle_memory": idle_memory,
    }


def tree_memory(pids: list[int]) -> tuple[float, float]:
    """(PSS, RSS) in MiB summed over pids."""
    pss = rss = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1])
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1])
        except OSError:
            pass
    return pss / 1024, rss / 1024


async def main(args: argparse.Namespace) -> int:
    config = SandboxConfig(isolation=args.mode)
    async with await Sandbox.start(None, config, ctx_text="") as probe:
        layers = "+".join(probe.layers)
        mode = probe.report.mode
    print(f"# Sandbox benchmark — mode {mode}: {layers}; document {len(DOC) / 2**20:.1f} MB\n")

    cell = await per_cell(config, args.cells)
    jailed = await fresh_jailed(config, args.fresh)
    bare = fresh_bare(config.python, args.fresh)
    base = cell["persistent worker: `x = 1`"][0]
    print("| per-cell round trip | median ms | p99 ms | vs persistent `x = 1` |\n|---|---|---|---|")
    for name, (med, p99) in cell.items():
        print(f"| {name} | {med:.3f} | {p99:.3f} | {med / base:.1f}x |")
    for name, (med, p99) in [("fresh jailed worker per cell (same layers)", jailed),
                             ("fresh bare `python3 -I -S -c` per cell (no jail)", bare)]:  # fmt: skip
        print(f"| {name} | {med:.2f} | {p99:.2f} | {med / base:.0f}x slower |")

    starts = await episode_start(config, args.starts)
    print(
        "\n| episode start (1 MB document, to the first cell's result) | median ms | p99 ms |\n|---|---|---|"
    )
    for name, (med, p99) in starts.items():
        print(f"| {name} | {med:.1f} | {p99:.1f} |")
    no_pool = starts["without pool (`Sandbox.start`)"][0]
    with_pool = starts["with pool (a pre-started worker waiting)"][0]
    print(f"\npool speed-up on episode start: {no_pool / with_pool:.1f}x")

    print(
        "\n| concurrent episodes | cells | cells/s | failures | PSS per episode MiB | RSS per episode MiB |"
    )
    print("|---|---|---|---|---|---|")
    results = []
    for n in (1, 8, 64, 256):
        r = await concurrency(config, n, args.total_cells)
        results.append(r)
        (pss, rss), count = r["memory"]
        print(
            f"| {n} | {r['cells']} | {r['cells_per_s']:.0f} | {r['failures']} | {pss / count:.1f} | {rss / count:.1f} |"
        )
    idle = [r["idle_memory"] for r in results if r["idle_memory"][1]]
    (pss, rss), count = idle[-1]
    print(
        f"\nidle pre-started worker (no document): PSS {pss / count:.1f} MiB, RSS {rss / count:.1f} MiB (n={count})"
    )

    ratio = jailed[0] / base
    floors = [
        (f"median per-cell overhead {base:.3f} ms < 1 ms", base < 1.0),
        (f"persistent {ratio:.0f}x faster than a fresh jailed process per cell (>= 20x)", ratio >= 20),
        (
            f"persistent {bare[0] / base:.0f}x faster than a bare fresh python per cell (>= 20x)",
            bare[0] / base >= 20,
        ),
        (f"256 live episodes, {results[-1]['failures']} failures", results[-1]["failures"] == 0),
    ]
    print()
    for text, ok in floors:
        print(f"{'PASS' if ok else 'FAIL'}: {text}")
    return 0 if all(ok for _, ok in floors) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="auto", choices=("auto", "bwrap", "plain", "unsafe-dev"))
    parser.add_argument("--cells", type=int, default=2000, help="cells per per-cell measurement")
    parser.add_argument("--fresh", type=int, default=30, help="fresh-process samples")
    parser.add_argument("--starts", type=int, default=20, help="episode-start samples")
    parser.add_argument("--total-cells", type=int, default=4096, help="cells per concurrency level")
    sys.exit(asyncio.run(main(parser.parse_args())))
