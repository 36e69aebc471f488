"""``Sandbox``: one episode's REPL, seen from the host. Runs cells, answers ``llm()``, enforces the limits.

A Sandbox owns one worker at a time and the document's read-only file descriptor (kept open, so a restarted
worker gets the same text). Per cell it sends ``exec``, services ``llm`` frames through the episode's async
handler (budget, size caps and accounting live here, never in the worker), and waits for the ``result``
frame under a hard deadline that ``llm()`` time pushes out (never past the caller's ``time_limit_s``, which
counts ``llm()`` time too). Between cells the worker is SIGSTOPped, so nothing a cell left behind (a profile
hook, a timer) gets CPU; a frame it sends when none is due is a protocol violation, found by the channel.
A hard timeout, a dead worker or a protocol violation replaces the worker and tells the model its variables
are gone; a malformed ``llm`` request costs one call of the budget and its id is never echoed back.
``close()`` ends a running cell at once (``SandboxClosed``), even one waiting for the sub-LM. Everything the worker sends is
re-validated: output is capped and control characters are escaped before the model or a terminal sees it.
It does not parse model text or score anything.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from fathom.sandbox.config import (
    CellResult,
    IsolationError,
    IsolationReport,
    LLMHandler,
    LLMRequest,
    SandboxConfig,
    SandboxStats,
)
from fathom.sandbox.launch import Launcher, Worker
from fathom.sandbox.protocol import ProtocolError

log = logging.getLogger("fathom.sandbox")
MAX_ID = 2**53  # request ids are JSON-safe integers; anything else is never echoed back


class SandboxClosed(RuntimeError):
    """The sandbox was closed before or while this cell ran (its episode was closed from outside)."""


# C0/C1 controls other than newline and tab (terminal escapes, NUL, carriage return), and lone surrogates.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def clean_text(text: str) -> str:
    r"""Make worker text safe for a terminal and for UTF-8: ESC becomes the four characters '\x1b'."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _cap(text: str, limit: int) -> tuple[str, int]:
    return (text, 0) if len(text) <= limit else (text[:limit], len(text) - limit)


def open_ctx(ctx_path: str | os.PathLike | None, ctx_text: str | None) -> tuple[int, int]:
    """(read-only fd, size in bytes) of the document: the file at ctx_path, or ctx_text in a sealed memfd."""
    if (ctx_path is None) == (ctx_text is None):
        raise ValueError("give exactly one of ctx_path and ctx_text")
    if ctx_text is not None:
        data = ctx_text.encode("utf-8", "surrogatepass")
        fd = os.memfd_create("fathom-ctx", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)  # the worker gets this fd: it must not edit the document
        return fd, len(data)
    fd = os.open(ctx_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # NONBLOCK: a FIFO must not hang us
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError(f"ctx_path must be a regular file: {ctx_path}")
    return fd, st.st_size


class Sandbox:
    """One episode's persistent, jailed Python REPL. Create with ``Sandbox.start`` or ``SandboxPool.start``."""

    def __init__(
        self,
        launcher: Launcher,
        spawn: Callable[[], Awaitable[Worker]],
        llm: LLMHandler | None,
        ctx: tuple[int, int],
        on_close: Callable[[Sandbox], Awaitable[None]] | None = None,
    ) -> None:
        self.config: SandboxConfig = launcher.config
        self._launcher, self._spawn, self._llm, self._on_close = launcher, spawn, llm, on_close
        self._ctx_fd, self._ctx_bytes = ctx
        self._worker: Worker | None = None
        self._lock = asyncio.Lock()
        self._closed = self._dirty = False
        self._llm_calls = self._llm_chars = self._cells = self._restarts = 0
        self._closing: asyncio.Future[None] | None = None  # resolved by close(): wakes a waiting cell
        self._closed_all = asyncio.Event()  # set once close() has released everything
        self._loading: asyncio.Future[None] | None = None  # a load the first execute() waits for

    @classmethod
    async def start(
        cls,
        ctx_path: str | os.PathLike | None,
        config: SandboxConfig | None = None,
        llm: LLMHandler | None = None,
        *,
        ctx_text: str | None = None,
    ) -> Sandbox:
        """Start a worker for this document (a file, or ``ctx_text`` kept in memory) and load it as ``ctx``."""
        launcher = Launcher(config or SandboxConfig(), workers="one")

        async def close_launcher(_: Sandbox) -> None:
            launcher.close()

        try:
            sandbox = cls(launcher, launcher.spawn, llm, open_ctx(ctx_path, ctx_text), close_launcher)
        except BaseException:
            launcher.close()
            raise
        await sandbox._begin(None)
        return sandbox

    async def _begin(self, worker: Worker | None, wait: bool = True) -> None:
        """Load the document into ``worker`` (or a freshly spawned one); on failure close everything.

        With ``wait=False`` the load is sent now and its reply awaited in the background, so a pooled
        start returns while the worker decodes the document: the first ``execute`` waits for it (and
        raises what it raised), so no cell ever runs before the document and its memory limit are in."""
        try:
            self._worker = worker or await self._spawn()
            load_id = self._send_load(self._worker)
            if wait:
                await self._loaded(self._worker, load_id)
            else:
                self._loading = asyncio.ensure_future(self._loaded(self._worker, load_id))
        except BaseException:
            await self.close()
            raise

    async def _load(self, worker: Worker) -> None:
        await self._loaded(worker, self._send_load(worker))

    def _send_load(self, worker: Worker) -> int:
        load_id = secrets.randbits(48)
        worker.channel.send({"op": "load", "id": load_id, "llm": self._llm is not None})
        socket.send_fds(worker.ctl, [b"c"], [self._ctx_fd])
        worker.ctl.close()
        return load_id

    async def _loaded(self, worker: Worker, load_id: int) -> None:
        timeout = self.config.start_timeout_s + self._ctx_bytes / 20e6  # decoding runs at ~500 MB/s
        try:
            reply = await worker.channel.recv(timeout)
        except (EOFError, ProtocolError, TimeoutError) as e:
            raise IsolationError(
                f"the sandbox worker failed to load the document: {type(e).__name__} {e}"
            ) from None
        if reply.get("op") != "loaded" or reply.get("id") != load_id:
            raise IsolationError("the sandbox worker answered the load with an unexpected frame")
        if worker.cgroup is not None:
            worker.cgroup.set_memory(self._launcher.memory_limit(self._ctx_bytes))

    async def _finish_loading(self) -> None:
        """Wait for a load `_begin` left running; a failed one ends the sandbox, as it would have at start."""
        assert self._loading is not None
        try:
            await asyncio.shield(self._loading)  # a cancelled cell leaves the load running for the next one
        except IsolationError:
            await self.close()
            raise
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._closed and (current is None or not current.cancelling()):  # close() ended the load
                raise SandboxClosed("the sandbox was closed while it loaded its document") from None
            raise
        self._loading = None

    # ---- public surface -------------------------------------------------------------------------------
    @property
    def layers(self) -> tuple[str, ...]:
        """Isolation layers that actually applied to the current worker."""
        return self.report.layers

    @property
    def report(self) -> IsolationReport:
        if self._worker is None:
            raise RuntimeError("the sandbox is closed")
        return self._worker.report

    @property
    def processes(self) -> list[int]:
        """Host pids of the current worker's process tree (bwrap's monitor, its init and the interpreter; a
        forked worker is one process)."""
        return list(self._worker.pids) if self._worker is not None else []

    @property
    def stats(self) -> SandboxStats:
        return SandboxStats(self._llm_calls, self._llm_chars, self._cells, self._restarts)

    async def execute(self, code: str, time_limit_s: float | None = None) -> CellResult:
        """Run one cell in the persistent namespace. Model mistakes come back in the result, never raised.

        ``time_limit_s`` caps this cell's wall time, ``llm()`` time included (a step's remaining time):
        the soft timer fires at min(soft limit, time_limit_s), the hard kill one grace period later.
        Raises ``SandboxClosed`` when ``close()`` ends the sandbox before or during the cell.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be str, not {type(code).__name__}")
        if time_limit_s is not None and not time_limit_s > 0:
            raise ValueError(f"time_limit_s must be > 0, got {time_limit_s}")
        async with self._lock:
            if self._closed:
                raise SandboxClosed("execute() on a closed Sandbox")
            if self._loading is not None:
                await self._finish_loading()
            self._cells += 1
            worker = self._worker
            assert worker is not None
            if self._dirty:  # an earlier execute() was cancelled mid-cell: the worker's state is unknown
                reason = "the previous cell was cancelled"
                return await self._restart(reason, False, 0.0, self._llm_calls, self._llm_chars)
            if not worker.channel.alive:  # it broke the protocol between cells (or died): never trusted again
                failure = worker.channel.failure
                if isinstance(failure, ProtocolError):
                    reason = f"ProtocolViolation: {failure} (after the previous cell)"
                else:
                    reason = "the REPL process died after the previous cell"
                return await self._restart(reason, False, 0.0, self._llm_calls, self._llm_chars)
            self._dirty = True
            result = await self._run_cell(code, time_limit_s)
            self._dirty = False
            return result

    async def close(self) -> None:
        """Kill the worker and release everything. Idempotent: a second call returns once the first is done."""
        if self._closed:
            await self._closed_all.wait()
            return
        self._closed = True
        if self._closing is not None and not self._closing.done():
            self._closing.set_result(None)
        worker, self._worker = self._worker, None
        loading, self._loading = self._loading, None
        if loading is not None:  # the load dies with the worker: its outcome no longer matters
            loading.cancel()
            if loading.done() and not loading.cancelled():
                loading.exception()  # retrieved, so asyncio does not report it as lost
        try:
            if worker is not None:
                await self._launcher.kill(worker)
            os.close(self._ctx_fd)
            if self._on_close is not None:
                await self._on_close(self)
        finally:
            self._closed_all.set()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ):
        await self.close()

    # ---- one cell -------------------------------------------------------------------------------------
    async def _run_cell(self, code: str, time_limit_s: float | None) -> CellResult:
        worker = self._worker  # close() may clear self._worker while this cell runs
        assert worker is not None
        cfg = self.config
        channel, grace = worker.channel, cfg.hard_timeout_s - cfg.soft_timeout_s
        soft = cfg.soft_timeout_s if time_limit_s is None else min(cfg.soft_timeout_s, time_limit_s)
        hard = soft + grace
        cell_id = secrets.randbits(48)
        started = time.perf_counter()
        # llm() time pushes the hard deadline out, but never past the caller's wall-clock limit
        step_end = None if time_limit_s is None else started + time_limit_s
        calls0, chars0, llm_time = self._llm_calls, self._llm_chars, 0.0
        frame = {"op": "exec", "id": cell_id, "code": code, "soft_timeout_s": soft}
        # JSON escapes at most 6 bytes per character: only a large cell needs its exact size
        limit = self.config.max_frame_bytes
        if len(code) * 6 > limit and len(json.dumps(frame)) > limit:
            return self._result(0.0, calls0, chars0, error="ValueError: the cell's code is too large")
        try:
            # Queued before the worker runs again: it finds the frame when it resumes, one wake-up, not two.
            channel.send(frame)
            worker.resume()
            deadline = started + hard
            while True:
                message = await channel.recv(deadline - time.perf_counter())
                op = message.get("op")
                if op == "llm":
                    t0 = time.perf_counter()
                    reply = await self._answer_llm(message, step_end)
                    spent = time.perf_counter() - t0
                    llm_time, deadline = llm_time + spent, deadline + spent  # llm() time is not cell time
                    if step_end is not None:
                        deadline = min(deadline, step_end + grace)
                    channel.send(reply)
                elif op == "result" and message.get("id") == cell_id:
                    worker.pause()  # nothing the cell left behind (a profile hook, a timer) runs until the next
                    elapsed = time.perf_counter() - started - llm_time
                    return self._from_worker(message, elapsed, calls0, chars0)
                else:
                    raise ProtocolError(f"unexpected {op!r} frame from the worker")
        except TimeoutError:
            reason, timed_out = f"TimeoutError: the cell ran past the hard time limit of {hard:g} s", True
        except EOFError:
            if self._closed:
                raise SandboxClosed("the sandbox was closed while a cell was running") from None
            oom = worker.cgroup is not None and worker.cgroup.oom_killed()
            reason = "MemoryError: the REPL process ran out of memory" if oom else "the REPL process died"
            timed_out = False
        except ProtocolError as e:
            reason, timed_out = f"ProtocolViolation: {e}", False
        elapsed = time.perf_counter() - started - llm_time
        return await self._restart(reason, timed_out, elapsed, calls0, chars0)

    async def _answer_llm(self, message: dict, step_end: float | None) -> dict:
        cfg, request_id = self.config, message.get("id")
        # The id is echoed only when it is what the worker's stub sends: a small non-negative int.
        valid_id = type(request_id) is int and 0 <= request_id < MAX_ID
        reply = {"op": "llm_result", "id": request_id if valid_id else None}
        items = message.get("items")
        if self._llm is None:
            reply["error"] = "llm() is not available in this episode"
            return reply
        if (
            not valid_id
            or not isinstance(items, list)
            or not 0 < len(items) <= cfg.max_batch
            or not all(
                isinstance(i, list) and len(i) == 2 and all(isinstance(s, str) for s in i) for i in items
            )
            or any(len(p) + len(c) > cfg.max_llm_chars for p, c in items)
        ):
            # The worker's stub never sends these: each costs one call of the budget, and one past it is
            # a protocol violation (a flood must not keep the host decoding frames for the whole cell).
            if self._llm_calls >= cfg.max_llm_calls:
                raise ProtocolError("malformed llm requests past the episode's llm budget")
            self._llm_calls += 1
            reply["error"] = "malformed llm request"
            return reply
        if self._llm_calls + len(items) > cfg.max_llm_calls:
            left = cfg.max_llm_calls - self._llm_calls
            reply["error"] = f"llm budget exhausted: {cfg.max_llm_calls} calls per episode, {left} left"
            return reply
        timeout = cfg.llm_timeout_s
        if step_end is not None:
            timeout = min(timeout, step_end - time.perf_counter())
            if timeout <= 0:
                reply["error"] = "the step's time limit ran out before this llm() call"
                return reply
        self._llm_calls += len(items)
        self._llm_chars += sum(len(p) + len(c) for p, c in items)
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_future()
        call = asyncio.ensure_future(self._llm([LLMRequest(p, c) for p, c in items]))
        try:
            # close() must not wait for a slow sub-LM: it resolves _closing and the call is dropped
            await asyncio.wait((call, self._closing), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if self._closed:
                raise SandboxClosed("the sandbox was closed while a cell was waiting for llm()")
            if not call.done():
                raise TimeoutError
            texts = call.result()
            if (
                not isinstance(texts, list)
                or len(texts) != len(items)
                or not all(isinstance(t, str) for t in texts)
            ):
                raise TypeError(f"the llm handler must return {len(items)} str, got {type(texts).__name__}")
            reply["texts"] = texts
        except TimeoutError:
            reply["error"] = f"the sub-LM did not answer within {timeout:g} s"
        except SandboxClosed:
            raise
        # The sandbox boundary: a failing handler becomes the model's error text, never a host crash.
        except Exception as e:
            log.warning("llm handler failed", exc_info=True)
            reply["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        finally:
            if not call.done():
                call.cancel()
        return reply

    def _from_worker(self, m: dict, elapsed: float, calls0: int, chars0: int) -> CellResult:
        """Re-validate the worker's result frame: types, caps, control characters."""
        stdout = m.get("stdout") if isinstance(m.get("stdout"), str) else ""
        dropped = m.get("dropped") if type(m.get("dropped")) is int and m["dropped"] > 0 else 0
        error = m.get("error") if isinstance(m.get("error"), str) else None
        answer_ready, answer = False, None
        raw = m.get("answer_json")
        if isinstance(raw, str):
            answer_ready = True
            limit = self.config.max_answer_chars
            try:
                answer = json.loads(raw) if len(raw) <= 6 * limit + 2 else raw[:limit]
            except (ValueError, RecursionError):
                answer = raw[:limit]
            if isinstance(answer, str):
                answer = clean_text(answer[:limit])
        return self._result(
            elapsed, calls0, chars0, stdout=stdout, dropped=dropped, error=error,
            timed_out=m.get("timed_out") is True, answer_ready=answer_ready, answer=answer,
        )  # fmt: skip

    def _result(
        self,
        elapsed: float,
        calls0: int,
        chars0: int,
        stdout: str = "",
        dropped: int = 0,
        error: str | None = None,
        timed_out: bool = False,
        restarted: bool = False,
        answer_ready: bool = False,
        answer: Any = None,
    ) -> CellResult:
        limit = self.config.max_output_chars
        stdout, more = _cap(clean_text(stdout), limit)
        dropped += more
        if dropped:
            sep = "" if not stdout or stdout.endswith("\n") else "\n"
            stdout += f"{sep}[... {dropped} chars truncated]"
        if error is not None:
            error, cut = _cap(clean_text(error), limit)
            error += f"\n[... {cut} chars truncated]" if cut else ""
        return CellResult(
            stdout=stdout, error=error, truncated_chars=dropped, answer_ready=answer_ready, answer=answer,
            elapsed_s=max(elapsed, 0.0), timed_out=timed_out, restarted=restarted,
            llm_calls=self._llm_calls - calls0, llm_chars=self._llm_chars - chars0,
        )  # fmt: skip

    async def _restart(
        self, reason: str, timed_out: bool, elapsed: float, calls0: int, chars0: int
    ) -> CellResult:
        """Replace the worker with a fresh one holding the same document; the model is told what was lost."""
        old, self._worker = self._worker, None
        if old is not None:
            await self._launcher.kill(old)
        if self._closed:
            raise SandboxClosed("the sandbox was closed while a cell was running")
        self._restarts += 1
        try:
            worker = await self._spawn()
            if self._closed:  # close() ran while the replacement started
                await self._launcher.kill(worker)
                raise SandboxClosed("the sandbox was closed while a cell was running")
            self._worker = worker
            await self._load(worker)
        except BaseException:  # no worker to run on: the episode cannot continue
            await self.close()
            raise
        self._dirty = False
        message = (
            f"{reason}. The REPL was restarted and every variable was lost; ctx, llm, llm_batch, answer and "
            "FINAL are set up again."
        )
        return self._result(elapsed, calls0, chars0, error=message, timed_out=timed_out, restarted=True)
