"""Side by side: `fathom serve` from this checkout against one from a baseline checkout, on the workload
of issue 17 item 8, in the same run, and the ratio of their steps/s.

Workload: tasks with a ~1 MB document, one-cell turns (``print(len(ctx))``), each episode runs to the turn
cap (12, the default of both servers) and the client resets as soon as it ends. N clients over /ws
(OpenEnv's `EnvClient`), each keeping its connection. Each server runs in its own cpuacct cgroup, so
"server CPU" is the server process plus every sandbox worker it starts. The two servers take turns level
by level (baseline, then this checkout) and the whole sequence runs ``--rounds`` times.

Printed per row: steps/s, server CPU per step and per episode (a reset plus 12 steps), errors (must be 0).
The last column is this checkout's steps/s divided by the baseline's at the same level and round.
A second table isolates the reset: ``--resets`` resets in a row per client and no steps (each reset ends
the client's previous episode), so its server CPU per reset is the reset's whole cost: closing the old
episode, loading the document into a worker, and starting the worker that refills the pool.

    git -C /work/main worktree add /tmp/main-baseline aa67a75
    .venv/bin/python bench/server_vs_main.py --baseline /tmp/main-baseline

Needs root (a cpuacct cgroup v1 hierarchy at /sys/fs/cgroup/cpuacct). It does not check answers: the turns
never answer, so every episode ends at the cap.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from fathom.env import RLMAction
from fathom.server import FathomEnvClient
from fathom.tasks import generate_task, write_tasks

REPO = Path(__file__).resolve().parents[1]
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
TURN = "```repl\nprint(len(ctx))\n```"


@dataclass
class Row:
    name: str
    clients: int
    round: int
    episodes: int
    steps: int
    errors: int
    wall_s: float
    cpu_s: float


class Server:
    """`python -m fathom serve` from ``checkout``, inside its own cpuacct cgroup."""

    def __init__(self, name: str, checkout: Path, task_file: Path, max_sessions: int, pool: int) -> None:
        self.name = name
        self.cgroup = CPUACCT / f"fathom-bench-{name}-{os.getpid()}"
        self.cgroup.mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        serve = [sys.executable, "-m", "fathom", "serve", "--port", str(port), "--tasks", str(task_file),
                 "--max-sessions", str(max_sessions), "--idle-timeout", "0", "--pool", str(pool),
                 "--log-level", "warning"]  # fmt: skip
        # The shell joins the cgroup, then becomes the server: every process it starts is counted.
        script = f'echo $$ > {self.cgroup}/cgroup.procs && exec "$@"'
        env = os.environ | {"PYTHONPATH": str(checkout / "src")}
        self.proc = subprocess.Popen(["sh", "-c", script, "sh", *serve], cwd=checkout, env=env)
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(900):  # up to 90 s: imports and the pool's first workers
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} server exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{name} server did not become healthy")

    def cpu_s(self) -> float:
        return int((self.cgroup / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)
        for _ in range(100):  # the last workers leave the cgroup a moment after the server exits
            try:
                self.cgroup.rmdir()
                return
            except OSError:
                time.sleep(0.1)


async def drive(
    url: str, task_ids: list[str], clients: int, episodes: int, steps: bool = True
) -> tuple[int, int, int]:
    """(episodes, steps, errors) of ``clients`` connections running ``episodes`` episodes in all; with
    ``steps=False`` each episode is its reset alone (what a reset costs)."""
    queue = list(range(episodes))
    counts = [0, 0, 0]

    async def client() -> None:
        env = FathomEnvClient(url)
        try:
            while queue:
                task_id = task_ids[queue.pop() % len(task_ids)]
                try:
                    result = await env.reset(task_id=task_id)
                    while steps and not result.observation.done:
                        result = await env.step(RLMAction(text=TURN))
                        counts[1] += 1
                    counts[0] += 1
                except Exception as exc:  # a benchmark counts failures instead of stopping at the first
                    counts[2] += 1
                    print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            await env.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return counts[0], counts[1], counts[2]


def measure_resets(server: Server, task_ids: list[str], clients: int, resets: int, rnd: int) -> Row:
    cpu0, t0 = server.cpu_s(), time.perf_counter()
    done, _, errors = asyncio.run(drive(server.url, task_ids, clients, resets, steps=False))
    wall, cpu = time.perf_counter() - t0, server.cpu_s() - cpu0
    print(f"{server.name:>9} x{clients:<3} round {rnd}: {done / wall:7.1f} resets/s, "
          f"{cpu / max(done, 1) * 1e3:6.1f} ms server CPU per reset, errors={errors}", file=sys.stderr)  # fmt: skip
    return Row(server.name, clients, rnd, done, 0, errors, wall, cpu)


def reset_table(rows: list[Row]) -> str:
    lines = [
        "| server | clients | round | resets | resets/s | server CPU ms/reset | errors | ms/reset ÷ baseline |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    base = {(r.clients, r.round): r.cpu_s / max(r.episodes, 1) for r in rows if r.name == "baseline"}
    for r in rows:
        per = r.cpu_s / max(r.episodes, 1)
        ratio = f"{per / base[(r.clients, r.round)]:.2f}" if r.name != "baseline" else "—"
        lines.append(
            f"| {r.name} | {r.clients} | {r.round} | {r.episodes} | {r.episodes / r.wall_s:.1f} | "
            f"{per * 1e3:.1f} | {r.errors} | {ratio} |"
        )
    return "\n".join(lines)


def measure(server: Server, task_ids: list[str], clients: int, episodes: int, rnd: int) -> Row:
    cpu0, t0 = server.cpu_s(), time.perf_counter()
    done, steps, errors = asyncio.run(drive(server.url, task_ids, clients, episodes))
    wall, cpu = time.perf_counter() - t0, server.cpu_s() - cpu0
    row = Row(server.name, clients, rnd, done, steps, errors, wall, cpu)
    print(f"{server.name:>9} x{clients:<3} round {rnd}: {steps / wall:7.1f} steps/s, "
          f"{cpu / max(done, 1) * 1e3:6.1f} ms server CPU per episode, errors={errors}", file=sys.stderr)  # fmt: skip
    return row


def table(rows: list[Row]) -> str:
    lines = [
        "| server | clients | round | episodes | steps/s | server CPU ms/step | server CPU ms/episode | "
        "errors | steps/s ÷ baseline |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    base = {(r.clients, r.round): r.steps / r.wall_s for r in rows if r.name == "baseline"}
    for r in rows:
        rate = r.steps / r.wall_s
        ratio = f"{rate / base[(r.clients, r.round)]:.2f}" if r.name != "baseline" else "—"
        lines.append(
            f"| {r.name} | {r.clients} | {r.round} | {r.episodes} | {rate:.1f} | "
            f"{r.cpu_s / max(r.steps, 1) * 1e3:.2f} | {r.cpu_s / max(r.episodes, 1) * 1e3:.1f} | {r.errors} | "
            f"{ratio} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the baseline (main)")
    parser.add_argument("--clients", default="1,16,64")
    parser.add_argument("--episodes", type=int, default=16, help="episodes per level (at least 2 per client)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--doc-tokens", type=int, default=250_000, help="~4 characters per token: ~1 MB")
    parser.add_argument("--pool", type=int, default=8)
    parser.add_argument(
        "--resets", type=int, default=48, help="resets per level of the reset-only table (0: none)"
    )
    parser.add_argument("--reset-clients", default="1,16")
    args = parser.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    tasks = [generate_task("niah", seed, args.doc_tokens) for seed in range(4)]
    rows: list[Row] = []
    reset_rows: list[Row] = []
    reset_levels = [int(c) for c in args.reset_clients.split(",")] if args.resets else []
    with tempfile.TemporaryDirectory() as tmp:
        task_file = Path(tmp) / "tasks.jsonl"
        write_tasks(task_file, tasks)
        print(f"documents: {[t.length_chars for t in tasks]} chars", file=sys.stderr)
        most = max(levels + reset_levels)  # every client's session fits under the cap
        servers = [Server(n, c, task_file, 2 * most, args.pool)
                   for n, c in (("baseline", args.baseline.resolve()), ("this", REPO))]  # fmt: skip
        try:
            ids = [t.id for t in tasks]
            for server in servers:  # warm-up, not measured
                asyncio.run(drive(server.url, ids, 2, 4))
            for rnd in range(1, args.rounds + 1):
                for clients in levels:
                    for server in servers:
                        rows.append(measure(server, ids, clients, max(args.episodes, 2 * clients), rnd))
                for clients in reset_levels:
                    for server in servers:
                        reset_rows.append(
                            measure_resets(server, ids, clients, max(args.resets, 2 * clients), rnd)
                        )
        finally:
            for server in servers:
                server.close()
    print(table(rows))
    if reset_rows:
        print()
        print(reset_table(reset_rows))
    return 1 if any(r.errors for r in rows + reset_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
