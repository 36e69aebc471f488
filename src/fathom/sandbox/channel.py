"""Host end of the pipe pair to one worker: non-blocking, framed, capped, on the running asyncio loop.

It turns bytes into decoded frames and back. It never blocks the loop, never trusts a length prefix beyond
``max_frame`` (no allocation happens before the check), and reports a dead or misbehaving peer as an
exception from ``recv``. It does not know what messages mean (``host.py`` does).

The protocol is strict request/reply: the worker sends exactly one frame ("ready" at start, then one per
host message) and then waits. So the channel counts the replies it is owed and treats any byte beyond them
as a protocol violation: it stops reading at once (nothing from that worker is buffered or decoded any
more) and every later ``recv`` raises. It likewise refuses a frame that arrives while the host's last
message has not been read in full (the worker is not reading its replies), so what the host holds for one
worker is bounded by one frame in, one message out and the pipe buffers.
"""

from __future__ import annotations

import asyncio
import collections
import io
import os

from fathom.sandbox.protocol import HEADER, ProtocolError, decode, encode


class _Reader(asyncio.Protocol):
    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self.buffer = bytearray()
        self.frames: collections.deque[dict] = collections.deque()
        self.failure: BaseException | None = None
        self.waiter: asyncio.Future | None = None
        self.owed = 1  # frames the worker may send now: its "ready", then one per host message
        self.transport: asyncio.ReadTransport | None = None
        self.writer: asyncio.WriteTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's pipe transports are not subclasses

    def data_received(self, data: bytes) -> None:
        if self.failure is not None:
            return
        if self.owed == 0:
            self._violation(f"the worker sent {len(data)} bytes when no reply was due")
            return
        self.buffer += data
        before = len(self.frames)
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size > self.max_frame:
                self._violation(f"the worker sent a frame of {size} bytes (cap {self.max_frame})")
                return
            end = HEADER.size + size
            if len(self.buffer) < end:
                break
            if self.writer is not None and self.writer.get_write_buffer_size():
                self._violation("the worker sent a frame without reading the host's last message")
                return
            body = bytes(self.buffer[HEADER.size : end])
            del self.buffer[:end]
            self.owed -= 1
            try:
                self.frames.append(decode(body))
            except ProtocolError as e:
                self._violation(str(e))
                return
            if self.buffer and self.owed == 0:
                self._violation("the worker sent more than one frame before the host answered")
                return
        if len(self.frames) > before:  # a piece of a large frame is not worth a wake-up
            self._wake()

    def eof_received(self) -> bool:
        self._fail(EOFError("the worker closed its pipe"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(EOFError("the worker's pipe is gone"))

    def _violation(self, reason: str) -> None:
        """Stop reading this worker for good: its bytes are dropped, not queued."""
        self.buffer = bytearray()
        self.frames.clear()
        if self.transport is not None:
            self.transport.pause_reading()
        self._fail(ProtocolError(reason))

    def _fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def _pipe_file(loop: asyncio.AbstractEventLoop, fd: int, mode: str) -> io.FileIO:
    """The file object a pipe transport is given for ``fd``, owning the fd only where the transport does not.

    uvloop hands the fd itself to libuv, which closes it when the transport closes, and then closes the file
    object too: a second close(fd). If another thread (a cgroup write, the executor) opened a file in
    between, that close takes its number: measured, 2 stray closes in 14,000 channels beside one thread
    opening files, and under the server's load pidfds, documents and pipes of other workers closed behind their
    owners' backs (EBADF, EEXIST from libuv, "the worker's pipe is gone"). asyncio's own transports close
    only the file object, so there it must own the fd."""
    owns = type(loop).__module__.partition(".")[0] != "uvloop"
    return io.FileIO(fd, mode.replace("b", ""), closefd=owns)


def _release(f: io.FileIO) -> None:
    """Close the fd of a pipe file that no transport took."""
    if not f.closefd and not f.closed:
        os.close(f.fileno())
    f.close()


def _expire(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Channel:
    """recv() -> dict, send(dict); EOFError when the worker is gone, ProtocolError when it misbehaves."""

    def __init__(
        self, reader: _Reader, rtransport: asyncio.ReadTransport, wtransport: asyncio.WriteTransport
    ):
        self._reader, self._rtransport, self._wtransport = reader, rtransport, wtransport
        reader.writer = wtransport

    @classmethod
    async def open(cls, read_fd: int, write_fd: int, max_frame: int) -> Channel:
        """Take ownership of the two fds (they are closed by ``close``, or here if the channel fails)."""
        loop = asyncio.get_running_loop()
        reader = _Reader(max_frame)
        rfile, wfile = _pipe_file(loop, read_fd, "rb"), _pipe_file(loop, write_fd, "wb")
        rtransport = None
        try:
            rtransport, _ = await loop.connect_read_pipe(lambda: reader, rfile)
            wtransport, _ = await loop.connect_write_pipe(asyncio.Protocol, wfile)
        except BaseException:
            if rtransport is not None:
                rtransport.close()  # it holds read_fd now
            else:
                _release(rfile)
            _release(wfile)
            raise
        return cls(reader, rtransport, wtransport)

    async def recv(self, timeout: float | None) -> dict:
        """The next frame; TimeoutError after ``timeout`` seconds (None: wait forever)."""
        reader = self._reader
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + max(timeout, 0.0)
        # A frame larger than the pipe buffer arrives in pieces, and every piece wakes us: wait until a
        # whole frame is in (or the peer failed), not just until some bytes came.
        while not reader.frames:
            if reader.failure is not None:
                raise reader.failure
            reader.waiter = waiter = loop.create_future()
            # call_later is much cheaper than wait_for (no extra task per frame).
            handle = loop.call_at(deadline, _expire, waiter) if deadline is not None else None
            try:
                await waiter
            finally:
                reader.waiter = None
                if handle is not None:
                    handle.cancel()
        return reader.frames.popleft()

    @property
    def alive(self) -> bool:
        """False once the worker closed its end or misbehaved."""
        return self._reader.failure is None and not self._wtransport.is_closing()

    @property
    def failure(self) -> BaseException | None:
        """Why the channel is dead (EOFError or ProtocolError), or None while it works."""
        return self._reader.failure

    def send(self, message: dict) -> None:
        """Send one message; the worker owes exactly one frame in reply."""
        if self._wtransport.is_closing() or self._reader.failure is not None:
            raise EOFError("the worker's pipe is gone")
        self._reader.owed += 1
        self._wtransport.write(encode(message))

    def close(self) -> None:
        self._rtransport.close()
        self._wtransport.close()
