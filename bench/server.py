"""Benchmark `fathom serve` on loopback against the environment called in-process, in the same run.

For each concurrency level, N clients run full episodes back to back (reset by task id, the scripted
expert policy of `fathom.policies.expert` with its simulated reader as the sub-LM) over tasks of all seven
families, as fast as they can; each client keeps its connection (or in-process environment) across its
episodes, as a trainer would. Three ways:

- ``in-process``: `RLMEnvironment.reset_async/step_async` on this process's event loop (no server);
- ``http``: `AsyncFathomClient` against a real `fathom serve` subprocess (session-keyed routes);
- ``ws``: OpenEnv's `EnvClient` (`FathomEnvClient`) over /ws against the same server.

Reported per row: episodes/s, steps/s, p50/p99 step latency (client-side), errors (must be 0), and the
peak RSS of the server process plus its sandbox workers (for in-process: this process plus its workers).
The ratio of in-process to server episodes/s is the server's overhead. Clients and server share this
machine's cores, as they would on a trainer host.

    .venv/bin/python bench/server.py                 # 1, 16, 64 clients
    .venv/bin/python bench/server.py --clients 1,4 --episodes 16
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx
import psutil

from fathom.env import EnvConfig, RLMAction, RLMEnvironment, RLMObservation
from fathom.policies.expert import expert_turn
from fathom.policies.readers import expert_reader
from fathom.sandbox import SandboxPool
from fathom.server import AsyncFathomClient, FathomEnvClient
from fathom.tasks import FAMILIES, Task, generate_task, write_tasks

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    episodes: int = 0
    steps: int = 0
    errors: int = 0
    correct: int = 0
    step_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    peak_rss: int = 0


class RssSampler:
    """Peak RSS of a process and its descendants, sampled every 200 ms in a thread.

    A child forked but not yet exec'd shares the parent's pages and would count them twice: children
    still running the parent's command line are skipped.
    """

    def __init__(self, pid: int) -> None:
        self.process, self.peak = psutil.Process(pid), 0
        self._cmdline = self.process.cmdline()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            total = self.process.memory_info().rss
            for child in self.process.children(recursive=True):
                try:
                    if child.cmdline() != self._cmdline:
                        total += child.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
            self.peak = max(self.peak, total)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class Driver(Protocol):
    """One client's connection to the environment, reused for all its episodes (as a trainer would)."""

    async def reset(self, task: Task) -> RLMObservation: ...
    async def step(self, text: str) -> RLMObservation: ...
    async def close(self) -> None: ...


class InProcess:
    def __init__(self, pool: SandboxPool | None) -> None:
        self.env = RLMEnvironment(EnvConfig(), sub_lm=expert_reader(), pool=pool)

    async def reset(self, task: Task) -> RLMObservation:
        return await self.env.reset_async(task=task)

    async def step(self, text: str) -> RLMObservation:
        return await self.env.step_async(RLMAction(text=text))

    async def close(self) -> None:
        await self.env.aclose()


class OverHttp:
    def __init__(self, url: str) -> None:
        self.client = AsyncFathomClient(url)

    async def reset(self, task: Task) -> RLMObservation:
        return await self.client.reset(task_id=task.id)

    async def step(self, text: str) -> RLMObservation:
        return await self.client.step(text)

    async def close(self) -> None:
        await self.client.close()


class OverWebSocket:
    def __init__(self, url: str) -> None:
        self.client = FathomEnvClient(url)

    async def reset(self, task: Task) -> RLMObservation:
        return (await self.client.reset(task_id=task.id)).observation

    async def step(self, text: str) -> RLMObservation:
        return (await self.client.step(RLMAction(text=text))).observation

    async def close(self) -> None:
        await self.client.close()


async def run_level(
    mode: str, url: str, tasks: list[Task], clients: int, episodes: int, pool_size: int
) -> Result:
    result, queue = Result(), list(range(episodes))
    pool = None
    if mode == "in-process" and pool_size:  # the same pre-started workers the server keeps
        pool = await SandboxPool(EnvConfig().sandbox, size=pool_size, handle_signals=False).open()
        await pool.wait_ready()

    def make_driver() -> Driver:
        if mode == "in-process":
            return InProcess(pool)
        return OverHttp(url) if mode == "http" else OverWebSocket(url)

    async def episode(driver: Driver, task: Task) -> None:
        observation, times = await driver.reset(task), []
        while not observation.done:
            turn = expert_turn(task, observation.iteration)
            started = time.perf_counter()
            observation = await driver.step(turn)
            times.append(time.perf_counter() - started)
        result.episodes += 1
        result.steps += len(times)
        result.step_s += times
        result.correct += observation.answer == task.answer

    async def worker() -> None:
        driver = make_driver()
        try:
            while queue:  # bounded: each pass takes one of `episodes` items
                task = tasks[queue.pop() % len(tasks)]
                try:
                    await episode(driver, task)
                except Exception as exc:  # a benchmark counts failures instead of stopping at the first
                    result.errors += 1
                    print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            await driver.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    result.wall_s = time.perf_counter() - started
    if pool is not None:
        await pool.close()
    return result


def start_server(task_file: Path, max_sessions: int, pool: int) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "fathom",
        "serve",
        "--port",
        str(port),
        "--tasks",
        str(task_file),
        "--max-sessions",
        str(max_sessions),
        "--idle-timeout",
        "0",
        "--sub-lm",
        "expert",
        "--pool",
        str(pool),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, cwd=REPO)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):  # up to 60 s for imports and start-up
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not become healthy")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,16,64", help="comma-separated concurrency levels")
    parser.add_argument("--episodes", type=int, default=64, help="episodes per level (at least 2 per client)")
    parser.add_argument("--length", type=int, default=8192, help="document length of the tasks (tokens)")
    parser.add_argument("--modes", default="in-process,http,ws")
    parser.add_argument("--pool", type=int, default=8, help="pre-started sandbox workers, both sides")
    args = parser.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    modes = args.modes.split(",")
    tasks = [generate_task(family, seed, args.length) for seed in range(2) for family in sorted(FAMILIES)]
    rows: list[tuple[str, int, Result]] = []
    with tempfile.TemporaryDirectory() as tmp:
        task_file = Path(tmp) / "tasks.jsonl"
        write_tasks(task_file, tasks, docs_dir=None)
        proc, url = start_server(task_file, max_sessions=max(levels) * 2, pool=args.pool)
        try:
            for mode in modes:  # warm-up, not measured: first imports, first sandbox starts, connections
                asyncio.run(run_level(mode, url, tasks, 1, len(tasks), args.pool))
            for clients in levels:
                episodes = max(args.episodes, 2 * clients)
                for mode in modes:
                    with RssSampler(os.getpid() if mode == "in-process" else proc.pid) as rss:
                        result = asyncio.run(run_level(mode, url, tasks, clients, episodes, args.pool))
                    result.peak_rss = rss.peak
                    rows.append((mode, clients, result))
                    print(
                        f"{mode:>10} x{clients:<3} {result.episodes / result.wall_s:7.1f} episodes/s "
                        f"errors={result.errors}",
                        file=sys.stderr,
                    )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(table(rows))
    return 1 if any(r.errors or r.correct != r.episodes for _, _, r in rows) else 0


def table(rows: list[tuple[str, int, Result]]) -> str:
    baseline = {c: r.episodes / r.wall_s for m, c, r in rows if m == "in-process"}
    lines = [
        "| mode | clients | episodes | episodes/s | steps/s | step p50 ms | step p99 ms | errors | "
        "peak RSS MiB | in-process ÷ this |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for mode, clients, r in rows:
        eps = r.episodes / r.wall_s
        ratio = f"{baseline[clients] / eps:.2f}" if clients in baseline else "—"
        lines.append(
            f"| {mode} | {clients} | {r.episodes} | {eps:.1f} | {r.steps / r.wall_s:.1f} | "
            f"{percentile(r.step_s, 50) * 1e3:.1f} | {percentile(r.step_s, 99) * 1e3:.1f} | {r.errors} | "
            f"{r.peak_rss / 2**20:.0f} | {ratio} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
