"""``SandboxPool``: pre-started jailed workers, so starting an episode costs a document load, not a spawn.

A pre-started worker has already been through bwrap, the uid drop, its cgroup and every in-worker layer;
it only waits for the document's file descriptor. ``start`` takes one (spawning directly when the pool is
empty), sends it the document and returns while the worker reads it (the first cell waits for that), and
refills in the background; a sandbox from the pool restarts from the pool too. The pool runs
the start-up self-test, and on ``close`` — or SIGTERM/SIGHUP when ``handle_signals`` — it kills every worker
it made and removes their cgroups and temp dirs. If the host dies outright, workers die with it
(bwrap --die-with-parent / PR_SET_PDEATHSIG) and the next pool sweeps what was left on disk.
Workers die with the thread that spawned them, so use the pool from one long-lived event-loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import signal
from types import TracebackType

from fathom.sandbox.config import IsolationReport, LLMHandler, SandboxConfig
from fathom.sandbox.host import Sandbox, open_ctx
from fathom.sandbox.launch import Launcher, Worker
from fathom.sandbox.selftest import self_test

log = logging.getLogger("fathom.sandbox")


class SandboxPool:
    """``async with SandboxPool(config, size=n) as pool: sandbox = await pool.start(ctx_path, llm)``"""

    def __init__(
        self, config: SandboxConfig | None = None, size: int = 8, handle_signals: bool = True
    ) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self.config, self.size, self.handle_signals = config or SandboxConfig(), size, handle_signals
        self.report: IsolationReport | None = None  # set by open(): the self-test's verdict
        self._launcher: Launcher | None = None
        self._ready: collections.deque[Worker] = collections.deque()
        self._pending = 0
        self._tasks: set[asyncio.Task] = set()
        self._live: set[Sandbox] = set()
        self._signals: list[int] = []
        self._closed = False

    async def open(self) -> SandboxPool:
        self._launcher = Launcher(self.config)
        try:
            self.report = await self_test(self._launcher)
        except BaseException:
            self._launcher.close()
            raise
        log.info("%s", self.report.describe())
        if self.handle_signals:
            self._install_signal_handlers()
        self._refill()
        return self

    async def __aenter__(self) -> SandboxPool:
        return await self.open()

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ):
        await self.close()

    @property
    def idle(self) -> int:
        """Pre-started workers waiting for a document."""
        return len(self._ready)

    async def start(
        self,
        ctx_path: str | os.PathLike | None,
        llm: LLMHandler | None = None,
        *,
        ctx_text: str | None = None,
    ) -> Sandbox:
        """A Sandbox for this document on a pre-started worker (same contract as ``Sandbox.start``)."""
        if self._launcher is None or self._closed:
            raise RuntimeError("the pool is not open")
        sandbox = Sandbox(self._launcher, self._take, llm, open_ctx(ctx_path, ctx_text), self._forget)
        self._live.add(sandbox)
        try:
            worker = await self._take(refill=False)
        except BaseException:
            await sandbox.close()
            raise
        await sandbox._begin(worker, wait=False)
        self._refill()  # only now: a spawn runs on this loop and would delay sending this episode's load
        return sandbox

    async def wait_ready(self) -> None:
        """Wait until the pool holds ``size`` pre-started workers (for benchmarks and tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _take(self, refill: bool = True) -> Worker:
        """A pre-started worker (or a fresh one when none is idle); also the restart path of pooled sandboxes."""
        assert self._launcher is not None
        while self._ready:
            worker = self._ready.popleft()
            if worker.proc.poll() is None and worker.channel.alive:
                if refill:
                    self._refill()
                return worker
            await self._launcher.kill(worker)
        self._refill()
        return await self._launcher.spawn()  # empty pool: do not wait behind the refill

    def _refill(self) -> None:
        for _ in range(self.size - len(self._ready) - self._pending):
            self._pending += 1
            task = asyncio.get_running_loop().create_task(self._prestart())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _prestart(self) -> None:
        assert self._launcher is not None
        try:
            worker = await self._launcher.spawn()
        except Exception:  # a failed background start must not kill the loop; start() will spawn and raise
            log.warning("pre-starting a sandbox worker failed", exc_info=True)
            return
        finally:
            self._pending -= 1
        if self._closed:
            await self._launcher.kill(worker)
        else:
            self._ready.append(worker)

    async def _forget(self, sandbox: Sandbox) -> None:
        self._live.discard(sandbox)

    async def close(self) -> None:
        """Kill every worker this pool made (idle and in use) and remove its temp dirs and cgroups."""
        if self._closed:
            return
        self._closed = True
        self._remove_signal_handlers()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await asyncio.gather(*(s.close() for s in list(self._live)), return_exceptions=True)
        if self._launcher is not None:
            await asyncio.gather(*(self._launcher.kill(w) for w in self._ready))
            self._ready.clear()
            self._launcher.close()

    # ---- signals ----------------------------------------------------------------------------------------
    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_DFL:
                continue  # the host has its own plan for this signal
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (ValueError, RuntimeError):  # not the main thread: rely on die-with-parent
                continue
            self._signals.append(sig)

    def _remove_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            loop.remove_signal_handler(sig)
        self._signals.clear()

    def _on_signal(self, sig: int) -> None:
        """Kill everything synchronously, then die of the signal as the host would have."""
        workers = list(self._ready) + [s._worker for s in self._live if s._worker is not None]
        for worker in workers:
            if worker.proc.poll() is None:
                worker.proc.kill()
            if worker.cgroup is not None:
                worker.cgroup.kill_all()
        if self._launcher is not None:
            self._launcher.close()
        self._remove_signal_handlers()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
