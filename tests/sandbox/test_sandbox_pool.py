"""The pool: pre-started workers, self-test, and cleanup on close, on host crash and on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time

import pytest
from conftest import config, pid_alive

from fathom.sandbox import Sandbox, SandboxClosed, SandboxPool

HOST_SCRIPT = """
import asyncio, json, os, signal, sys
sys.path.insert(0, {tests!r})
from conftest import config
from fathom.sandbox import Sandbox, SandboxPool

async def main(mode, how):
    pool = await SandboxPool(config(mode), size=2, handle_signals=True).open()
    await pool.wait_ready()
    sandboxes = [await pool.start(None, ctx_text="doc") for _ in range(2)]
    solo = await Sandbox.start(None, config(mode), ctx_text="solo")
    await sandboxes[0].execute("x = 1")
    await pool.wait_ready()
    pids = [p for s in [*sandboxes, solo] for p in s.processes] + [p for w in pool._ready for p in w.pids]
    pids += [l.fork_server.popen.pid for l in (pool._launcher, solo._launcher) if l.fork_server]
    cgroups = [d for l in (pool._launcher, solo._launcher) if l.cgroups for d in l.cgroups.dirs.values()]
    runtimes = [pool._launcher.runtime, solo._launcher.runtime]
    print(json.dumps({{"pids": pids, "runtimes": runtimes, "cgroups": cgroups}}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGTERM)
    await asyncio.sleep(30)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def run(coro):
    return asyncio.run(coro)


def host(mode: str, how: str) -> tuple[dict, int]:
    script = HOST_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", script, mode, how], capture_output=True, text=True, timeout=60
    )
    last = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert last, done.stderr[-2000:]
    return json.loads(last[-1]), done.returncode


def wait_dead(pids: list[int], seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if pid_alive(p)]


def test_prestarted_workers_make_episode_start_cheap() -> None:
    async def go():
        async with SandboxPool(config(), size=4, handle_signals=False) as pool:
            await pool.wait_ready()
            idle = pool.idle
            pooled, fresh = [], []
            for _ in range(3):
                t0 = time.perf_counter()
                sb = await pool.start(None, ctx_text="doc")
                pooled.append(time.perf_counter() - t0)
                await pool.wait_ready()
                t0 = time.perf_counter()
                solo = await Sandbox.start(None, config(), ctx_text="doc")
                fresh.append(time.perf_counter() - t0)
                assert (await sb.execute("print(ctx)")).stdout == "doc\n"
                await solo.close()
            died = await sb.execute("import os\nos._exit(1)")  # the replacement comes from the pool too
            after = await sb.execute("print(ctx)")
            return idle, statistics.median(pooled), statistics.median(fresh), died, after, pool.report

    idle, pooled, fresh, died, after, report = run(go())
    assert idle == 4
    assert pooled * 3 < fresh, (pooled, fresh)
    assert died.restarted and after.stdout == "doc\n"
    if "seccomp" in report.layers:
        assert report.info["probes"]["exec"] == "PermissionError"
        assert report.info["probes"]["socket"] == "PermissionError"
    assert report.info["probes"]["write_host_file"] == "blocked"


def test_close_kills_idle_busy_and_finished_workers_and_removes_dirs() -> None:
    async def go():
        pool = await SandboxPool(config(), size=3, handle_signals=False).open()
        await pool.wait_ready()
        sandboxes = [await pool.start(None, ctx_text=str(i)) for i in range(3)]
        busy = asyncio.create_task(sandboxes[0].execute("while True:\n    pass"))
        await (
            pool.wait_ready()
        )  # the three refills are idle workers too (on a loaded machine they take a while)
        await asyncio.sleep(0.1)
        pids = [p for s in sandboxes for p in s.processes] + [p for w in pool._ready for p in w.pids]
        launcher = pool._launcher
        paths = [launcher.runtime, *(launcher.cgroups.dirs.values() if launcher.cgroups else [])]
        await pool.close()
        busy_error = None
        try:
            await busy
        except RuntimeError as e:
            busy_error = str(e)
        return pids, paths, busy_error

    pids, paths, busy_error = run(go())
    assert len(pids) >= 6
    assert wait_dead(pids, 1.0) == []
    assert [p for p in paths if os.path.exists(p)] == []
    assert busy_error == "the sandbox was closed while a cell was running"


def test_workers_die_with_a_killed_host_and_the_next_host_sweeps_its_dirs(mode: str) -> None:
    info, rc = host(mode, "kill")
    assert rc == -9
    assert len(info["pids"]) >= 5
    assert wait_dead(info["pids"]) == []

    async def fresh_start() -> None:  # a new launcher sweeps what the dead host left on disk
        await (await Sandbox.start(None, config(mode), ctx_text="")).close()

    run(fresh_start())
    leftovers = [p for p in info["runtimes"] + info["cgroups"] if os.path.exists(p)]
    assert leftovers == []


def test_sigterm_kills_workers_and_removes_the_pool_dirs() -> None:
    info, rc = host("auto", "term")
    assert rc == -15
    assert wait_dead(info["pids"]) == []
    assert not os.path.exists(info["runtimes"][0])  # the pool's own dir went with the signal handler


def test_a_pooled_start_sends_the_document_and_the_first_cell_waits_for_it() -> None:
    """``start`` returns while the worker decodes the document; the first cell runs only once it is in
    (an exec sent earlier would meet the load's reply: a protocol error and a restart), and closing a
    sandbox whose load is still in flight kills its worker and raises nothing."""
    doc = "é" * 3_000_000  # 6 MB of UTF-8: decoding it takes the worker milliseconds

    async def go():
        async with SandboxPool(config(), size=2, handle_signals=False) as pool:
            await pool.wait_ready()
            sb = await pool.start(None, ctx_text=doc)
            first = await sb.execute("print(len(ctx), set(ctx) == {'é'})")
            await sb.close()
            early = await pool.start(None, ctx_text=doc)
            pids = early.processes
            await early.close()
            loading = await pool.start(None, ctx_text=doc)
            cell = asyncio.create_task(loading.execute("print(1)"))
            await asyncio.sleep(0)  # the cell is waiting for the load
            await loading.close()
            with pytest.raises(SandboxClosed):
                await cell
            return first, pids + loading.processes

    first, pids = run(go())
    assert (first.stdout, first.error, first.restarted) == ("3000000 True\n", None, False)
    assert pids and wait_dead(pids) == []
