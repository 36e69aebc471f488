"""What a worker cannot do to the host outside the cells' own limits: grow the host's memory with frames
nobody asked for, burn CPU between cells, or keep a step or a closing sandbox waiting.

The default tests check the behaviour (a violation restarts the worker and says so, a step or a close
interrupts what runs). The ``slow`` hostile tests measure the bounds that issue 17 sets: host RSS growth under
the two memory attacks, the worker's CPU in the 10 s after its step, and how fast a close ends a step.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Coroutine

import pytest
from conftest import Recorder, config

from fathom.env import EnvConfig, RLMAction, RLMEnvironment
from fathom.sandbox import Sandbox, SandboxClosed
from fathom.sandbox.channel import Channel
from fathom.sandbox.launch import STOP_DELAY_S
from fathom.sandbox.protocol import ProtocolError, encode
from fathom.tasks import generate_task

MiB = 1 << 20
DOC = "ledger line\n" * 100

# Installs a profile hook that acts when the worker goes back to wait for its next cell (the worker's
# read_frame), i.e. after the host has its result: the attack of issue 17, items 1a and 2.
HOOK = """import sys, os, json, struct
_fd = json.loads(sys.argv[-1])['fd_out']
_body = json.dumps({{'op': 'llm', 'id': 1, 'items': [['q' * {size}, '']]}}).encode()
_frame = struct.pack('>I', len(_body)) + _body
_left = [{count}]
def _hook(frame, event, arg):
    if event == 'call' and frame.f_code.co_name == 'read_frame':
        {action}
sys.setprofile(_hook)
"""
WRITE_FRAMES = "while _left[0] > 0:\n            _left[0] -= 1\n            os.write(_fd, _frame)"
BURN_CPU = "while True:\n            pass"

# Inside one cell: llm frames with a huge id and malformed items, never reading a reply (item 1b).
ID_FLOOD = """import sys, os, json, struct
_fd = json.loads(sys.argv[-1])['fd_out']
_body = json.dumps({{'op': 'llm', 'id': 'i' * {size}, 'items': [[1, 2, 3]]}}).encode()
for _ in range({count}):
    os.write(_fd, struct.pack('>I', len(_body)) + _body)
"""


def sync(test: Callable[[], Coroutine]) -> Callable[[], None]:
    """Run an async test on a fresh event loop (pytest-asyncio is not a dependency)."""

    def run() -> None:
        asyncio.run(test())

    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


def task() -> dict:
    return generate_task("niah", 1, 1024).to_dict()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


class PeakRss:
    """Peak RSS of this process above its value at entry, sampled every 10 ms in a thread."""

    def __init__(self) -> None:
        self.base = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, rss_bytes())

    @property
    def growth(self) -> int:
        return self.peak - self.base

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state first, then ppid, ..."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks (USER_HZ = 100)


# ---- behaviour (default suite) -------------------------------------------------------------------------


@sync
async def test_worker_is_stopped_soon_after_its_cell_and_runs_the_next() -> None:
    """Between cells the interpreter is SIGSTOPped within STOP_DELAY_S; a cell sooner than that cancels the
    stop, a later one continues the worker: both answer."""
    async with await Sandbox.start(None, config(), ctx_text=DOC) as sandbox:
        await sandbox.execute("x = 1")
        pid = sandbox.processes[-1]
        assert (await sandbox.execute("x += 1")).error is None  # back to back: the stop was still pending
        await asyncio.sleep(STOP_DELAY_S + 0.2)
        assert stat_fields(pid)[0] == "T"  # stopped
        result = await sandbox.execute("print(x)")
        assert result.error is None and result.stdout.strip() == "2"


@sync
async def test_channel_refuses_frames_nobody_asked_for() -> None:
    """The worker owes one frame per host message: bytes beyond that are a violation, never queued."""
    host_r, worker_w = os.pipe()
    worker_r, host_w = os.pipe()
    channel = await Channel.open(host_r, host_w, max_frame=MiB)
    try:
        os.write(worker_w, encode({"op": "ready"}))
        assert (await channel.recv(5))["op"] == "ready"
        assert channel.alive
        for _ in range(3):  # nothing was sent to the worker: no reply is due
            os.write(worker_w, encode({"op": "llm", "id": 1, "items": [["q", ""]]}))
        await asyncio.sleep(0.1)
        assert not channel.alive and isinstance(channel.failure, ProtocolError)
        assert "no reply was due" in str(channel.failure)
        with pytest.raises(ProtocolError):
            await channel.recv(1)
    finally:
        channel.close()
        os.close(worker_w)
        os.close(worker_r)


@sync
async def test_frames_after_the_result_restart_the_worker() -> None:
    async with await Sandbox.start(None, config(), ctx_text=DOC) as sandbox:
        await sandbox.execute("x = 1")
        results = [await sandbox.execute(HOOK.format(size=10, count=3, action=WRITE_FRAMES))]
        # The hook's frames may share a read with the result (the cell reports it), or, the worker being
        # stopped between cells, reach the host only after a later cell's result (that cell's successor
        # reports it): either way the worker is replaced and the model is told, within a few cells.
        while not results[-1].restarted and len(results) < 4:
            results.append(await sandbox.execute("print(x)"))
        reported = results[-1]
        assert reported.restarted, results
        # told as a protocol violation, or, where the violation was caught while no cell ran and the worker
        # was killed then, as the worker's death
        assert "ProtocolViolation" in reported.error or "process died" in reported.error, reported
        assert "every variable was lost" in reported.error
        assert (await sandbox.execute("print(len(ctx))")).stdout == f"{len(DOC)}\n"
        assert sandbox.stats.llm_calls == 0  # the unasked-for llm frames were never answered


@sync
async def test_llm_flood_with_huge_ids_is_charged_and_never_echoed() -> None:
    recorder = Recorder()
    async with await Sandbox.start(None, config(), recorder, ctx_text=DOC) as sandbox:
        result = await sandbox.execute(ID_FLOOD.format(size=MiB, count=40) + "print('flooded')")
        assert result.restarted and "ProtocolViolation" in result.error, result
        assert result.llm_calls <= 20 and recorder.calls == 0
        assert (await sandbox.execute("print(1)")).stdout == "1\n"


@sync
async def test_malformed_llm_requests_cost_budget() -> None:
    """A few malformed requests, each waiting for its reply as the stub does: answered with an error and
    a null id, and each one charged to the episode's llm budget."""
    code = (
        "import sys, os, json, struct\nfds = json.loads(sys.argv[-1])\n"
        "import __main__\nread = __main__.protocol.read_frame\nreplies = []\n"
        "for i in range(3):\n"
        "    body = json.dumps({'op': 'llm', 'id': 'x' * 1000, 'items': [['q', 'c', 'extra']]}).encode()\n"
        "    os.write(fds['fd_out'], struct.pack('>I', len(body)) + body)\n"
        "    replies.append(read(fds['fd_in'], 1 << 20))\n"
        "print([(r['id'], r['error']) for r in replies])"
    )
    async with await Sandbox.start(None, config(), Recorder(), ctx_text=DOC) as sandbox:
        result = await sandbox.execute(code)
        assert result.error is None, result.error
        assert result.stdout == str([(None, "malformed llm request")] * 3) + "\n"
        assert result.llm_calls == 3 and sandbox.stats.llm_calls == 3


@sync
async def test_time_limit_covers_llm_time() -> None:
    """A cell's wall-clock limit includes the sub-LM's time: a slow handler is cut off at the limit."""
    slow = Recorder(delay_s=30)
    code = "try:\n    llm('q')\nexcept RuntimeError as e:\n    print(e)"
    async with await Sandbox.start(
        None, config(soft_timeout_s=10, hard_timeout_s=12), slow, ctx_text=DOC
    ) as sb:
        result = await sb.execute(code, time_limit_s=0.5)
        assert "llm() failed: the sub-LM did not answer within" in result.stdout, result
        assert not result.restarted


@sync
async def test_step_time_limit_covers_all_cells() -> None:
    """Five blocks that each sleep forever: the step stops at its own limit, not 5 x the cell limit."""
    sandbox = config(soft_timeout_s=10, hard_timeout_s=12)
    env = RLMEnvironment(EnvConfig(step_timeout_s=1.0, sandbox=sandbox))
    try:
        await env.reset_async(task=task())
        await env.step_async(RLMAction(text="```repl\nkept = 7\n```"))
        sleepy = "\n".join("```repl\nimport time\ntime.sleep(1000)\n```" for _ in range(5))
        obs = await env.step_async(RLMAction(text=sleepy))
        assert len(obs.cells) == 5 and not obs.done
        first, rest = obs.cells[0], obs.cells[1:]
        assert (
            first.timed_out and not first.restarted and "the time its turn had left (1 s)" in first.error
        ), first
        assert all(
            c.timed_out and "not run: this turn used up its time limit of 1 s" in c.error for c in rest
        )
        obs = await env.step_async(RLMAction(text="```repl\nprint(kept)\n```"))
        assert obs.cells[0].stdout == "7\n"  # the soft timer interrupted the cell: variables are kept
    finally:
        await env.aclose()


@sync
async def test_close_interrupts_a_running_step() -> None:
    env = RLMEnvironment(EnvConfig(sandbox=config(soft_timeout_s=10, hard_timeout_s=12)))
    await env.reset_async(task=task())
    step = asyncio.ensure_future(
        env.step_async(RLMAction(text="```repl\nimport time\ntime.sleep(1000)\n```"))
    )
    await asyncio.sleep(0.5)
    await env.aclose()
    obs = await asyncio.wait_for(step, 5)
    assert obs.done and obs.end_reason == "closed"
    assert env.state.done and env.state.iteration == 1


@sync
async def test_close_interrupts_a_cell_waiting_for_llm() -> None:
    never = Recorder(delay_s=1000)
    sandbox = await Sandbox.start(None, config(), never, ctx_text=DOC)
    cell = asyncio.ensure_future(sandbox.execute("llm('q')"))
    while not never.batches:
        await asyncio.sleep(0.01)
    await sandbox.close()
    with pytest.raises(SandboxClosed):
        await asyncio.wait_for(cell, 5)


# ---- the bounds (hostile, slow) ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.hostile
@sync
async def test_hook_after_step_cannot_grow_host_memory() -> None:
    """Item 1a: 400 frames of 1 MiB written by a profile hook once the step has answered."""
    async with await Sandbox.start(None, config(), ctx_text=DOC) as sandbox:
        with PeakRss() as rss:
            await sandbox.execute(HOOK.format(size=MiB, count=400, action=WRITE_FRAMES))
            await asyncio.sleep(5)  # the hook writes while the host waits for the next cell
            after = await sandbox.execute("print(1)")
        assert rss.growth < 50 * MiB, f"host RSS grew by {rss.growth / MiB:.0f} MiB"
        # What the model is told is `test_frames_after_the_result_restart_the_worker`'s to check: with 1 MiB
        # frames the violation is caught in some runs and not yet in others (the hook can block in its first
        # write before the worker is stopped); the host keeps nothing of them either way, and goes on.
        assert after.stdout == "1\n" or after.restarted


@pytest.mark.slow
@pytest.mark.hostile
@sync
async def test_huge_id_flood_cannot_grow_host_memory() -> None:
    """Item 1b: llm frames with a 1 MiB id and malformed items, replies never read, in one cell."""
    async with await Sandbox.start(None, config(hard_timeout_s=10), Recorder(), ctx_text=DOC) as sandbox:
        with PeakRss() as rss:
            result = await sandbox.execute(ID_FLOOD.format(size=MiB, count=2000))
        assert rss.growth < 50 * MiB, f"host RSS grew by {rss.growth / MiB:.0f} MiB"
        assert result.restarted and "ProtocolViolation" in result.error and result.llm_calls <= 20


@pytest.mark.slow
@pytest.mark.hostile
@sync
async def test_hook_after_step_gets_no_cpu() -> None:
    """Item 2: a hook that spins once the step has answered burns < 0.5 CPU-s in the next 10 s."""
    async with await Sandbox.start(None, config(), ctx_text=DOC) as sandbox:
        await sandbox.execute("x = 1")
        pid = sandbox.processes[-1]
        result = await sandbox.execute(HOOK.format(size=1, count=0, action=BURN_CPU))
        assert result.error is None
        before = cpu_seconds(pid)
        await asyncio.sleep(10)
        burned = cpu_seconds(pid) - before
        assert burned < 0.5, f"the worker burned {burned:.2f} CPU-s between cells"
        # The next cell wakes the hook, which never reads the cell: the hard limit ends it.
        after = await sandbox.execute("print(x)")
        assert after.restarted and "hard time limit" in after.error


@pytest.mark.slow
@pytest.mark.hostile
@sync
async def test_close_ends_a_step_within_a_second() -> None:
    """Item 3: five sleeping blocks; the close sent 3 s in ends the step in < 1 s."""
    env = RLMEnvironment(EnvConfig(sandbox=config(soft_timeout_s=10, hard_timeout_s=12)))
    await env.reset_async(task=task())
    sleepy = "\n".join("```repl\nimport time\ntime.sleep(1000)\n```" for _ in range(5))
    step = asyncio.ensure_future(env.step_async(RLMAction(text=sleepy)))
    await asyncio.sleep(3)
    closed_at = time.perf_counter()
    await env.aclose()
    obs = await asyncio.wait_for(step, 5)
    assert time.perf_counter() - closed_at < 1.0
    assert obs.end_reason == "closed"
