"""What one pooled sandbox episode costs in CPU, this checkout against another, alternating in one run.

An episode here is what a server reset plus one step asks of the sandbox: `SandboxPool.start` with a ~1 MB
document, one cell (``print(len(ctx))``), `close`, and the pool starting the worker that replaces it.
Each run is a fresh process in a cpuacct cgroup of its own, so the CPU counted is the host process plus
the fork server and every worker tree it starts; the host's own share comes from ``getrusage``. The two
checkouts take turns ``--pairs`` times (this machine's noise between runs of one tree reaches ~20%), and
the medians are compared.

    git -C /work/main worktree add /tmp/base HEAD~1
    sudo .venv/bin/python bench/episode_cpu.py --baseline /tmp/base

Needs root (a cpuacct cgroup v1 hierarchy at /sys/fs/cgroup/cpuacct, and the fork server). It checks
each cell's output. It does not measure the server's HTTP/WebSocket share (`bench/server_vs_main.py` does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
DOC_CHARS = 1_000_000


async def measure(n: int, warm: int, usage: Path) -> dict:
    """``warm`` episodes, then ``n`` measured ones on the same pool; per-episode ms."""
    from fathom.sandbox import SandboxConfig, SandboxPool

    doc = "x" * DOC_CHARS

    async def episode(pool: SandboxPool) -> None:
        sandbox = await pool.start(None, None, ctx_text=doc)
        result = await sandbox.execute("print(len(ctx))")
        if result.stdout != f"{DOC_CHARS}\n":
            raise RuntimeError(f"the cell printed {result.stdout!r} (error {result.error!r})")
        await sandbox.close()

    async with SandboxPool(SandboxConfig(), size=4, handle_signals=False) as pool:
        for _ in range(warm):
            await episode(pool)
        await asyncio.sleep(0.5)  # the warm-up's refills are done
        r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), int(usage.read_text()), time.perf_counter()
        for _ in range(n):
            await episode(pool)
        t1 = time.perf_counter()
        await asyncio.sleep(0.5)  # the last refills finish inside the CPU count (not the wall time)
        r1, c1 = resource.getrusage(resource.RUSAGE_SELF), int(usage.read_text())
    host = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3 / n
    total = (c1 - c0) / 1e6 / n
    return {"total_ms": total, "host_ms": host, "trees_ms": total - host, "wall_ms": (t1 - t0) * 1e3 / n}


def child(n: int, warm: int) -> dict:
    """Run inside a fresh cgroup of its own."""
    cgroup = CPUACCT / f"fathom-episode-cpu-{os.getpid()}"
    cgroup.mkdir()
    try:
        (cgroup / "cgroup.procs").write_text(str(os.getpid()))
        return asyncio.run(measure(n, warm, cgroup / "cpuacct.usage"))
    finally:
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(100):  # the last workers leave the cgroup a moment after they are killed
            try:
                cgroup.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def run(checkout: Path, n: int, warm: int) -> dict:
    env = os.environ | {"PYTHONPATH": str(checkout / "src")}
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(n), "--warm", str(warm)],
        env=env, cwd=checkout, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout to compare against")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.warm)))
        return 0
    if args.baseline is None:
        parser.error("--baseline is required")
    runs: dict[str, list[dict]] = {"baseline": [], "this": []}
    for i in range(args.pairs):
        for name, checkout in (("baseline", args.baseline), ("this", REPO)):
            row = run(checkout, args.episodes, args.warm)
            runs[name].append(row)
            print(
                f"pair {i + 1} {name:>8}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()),
                file=sys.stderr,
            )
    keys = ("total_ms", "host_ms", "trees_ms", "wall_ms")
    print("| checkout | CPU ms/episode | host | fork server + trees | wall ms/episode |")
    print("|---|--:|--:|--:|--:|")
    medians = {name: {k: statistics.median(r[k] for r in rows) for k in keys} for name, rows in runs.items()}
    for name, m in medians.items():
        print(f"| {name} (median of {args.pairs}) | " + " | ".join(f"{m[k]:.2f}" for k in keys) + " |")
    print(
        f"\nCPU per episode, this ÷ baseline: {medians['this']['total_ms'] / medians['baseline']['total_ms']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
