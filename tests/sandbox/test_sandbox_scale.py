"""Scale: a 100 MB document, and more than 200 episodes alive at once on one event loop (slow)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time

import pytest
from conftest import Recorder, config, pid_alive

from fathom.sandbox import Sandbox, SandboxPool

pytestmark = pytest.mark.slow


def test_a_100_mb_document(tmp_path) -> None:
    line = "row 0042: the ledger balances, más o menos — ✓\n"
    path = tmp_path / "big.txt"
    with open(path, "w") as f:
        for _ in range(100 * 2**20 // len(line.encode())):
            f.write(line)
    path.write_text(path.read_text() + "NEEDLE=7391\n")
    data = path.read_bytes()

    async def go():
        t0 = time.perf_counter()
        async with await Sandbox.start(path, config(soft_timeout_s=20, hard_timeout_s=30)) as sb:
            start_s = time.perf_counter() - t0
            found = await sb.execute("import re\nprint(re.search(r'NEEDLE=(\\d+)', ctx).group(1), len(ctx))")
            digest = await sb.execute("import hashlib\nprint(hashlib.sha256(ctx.encode()).hexdigest())")
            return start_s, found, digest

    start_s, found, digest = asyncio.run(go())
    assert found.stdout == f"7391 {len(data.decode())}\n"
    assert digest.stdout == hashlib.sha256(data).hexdigest() + "\n"
    assert start_s < 10


def test_220_live_episodes_at_once() -> None:
    n = 220

    async def episode(
        pool: SandboxPool, i: int, gate: asyncio.Event, started: list
    ) -> tuple[str, str, list[int]]:
        if (
            i % 2
        ):  # half from the pool, half standalone (each with its own launcher, uid block and cgroup root)
            sb = await pool.start(None, Recorder(), ctx_text=f"document {i}")
        else:
            sb = await Sandbox.start(None, config(), Recorder(), ctx_text=f"document {i}")
        started.append(sb)
        await sb.execute(f"mine = {i}")
        if len(started) == n:
            gate.set()
        await gate.wait()  # everyone is alive before anyone runs the checking cell
        r = await sb.execute("print(mine, ctx, llm('q', ctx))")
        return r.stdout, r.error or "", sb.processes

    async def go():
        gate, started = asyncio.Event(), []
        async with SandboxPool(config(), size=16, handle_signals=False) as pool:
            results = await asyncio.gather(*(episode(pool, i, gate, started) for i in range(n)))
            alive = sum(all(pid_alive(p) for p in s.processes) for s in started)
            await asyncio.gather(*(s.close() for s in started))
        return results, alive

    def runtime_dirs() -> set[str]:  # this process's launchers' dirs (other tests' too: compared, not listed)
        return {d for d in os.listdir("/tmp") if d.startswith(f"fathom-sbx-{os.getpid()}-")}

    before = runtime_dirs()
    results, alive = asyncio.run(go())
    assert alive == n
    for i, (stdout, error, _) in enumerate(results):
        assert (stdout, error) == (f"{i} document {i} echo q [{len(f'document {i}')}]\n", "")
    pids = [p for _, _, ps in results for p in ps]
    assert len(set(pids)) == len(pids) and not any(pid_alive(p) for p in pids)
    assert runtime_dirs() <= before, "a launcher of this test left its runtime dir behind"
