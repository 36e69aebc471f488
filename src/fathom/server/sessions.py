"""Session bookkeeping of `fathom serve`: who holds an environment, for how long, and cleaning up after.

`SessionRegistry` owns the session-keyed HTTP sessions (one `RLMEnvironment` each, with a lock that
serialises its steps), counts OpenEnv WebSocket connections against the same cap, reaps sessions idle
longer than the timeout, and closes every environment it knows of — including the WebSocket ones, which
OpenEnv's `HTTPEnvServer` creates through our factory — on shutdown, so no sandbox worker outlives the
server. `WebSocketGate` is the ASGI middleware that takes and returns a WebSocket's slot and applies the
idle timeout to a silent WebSocket client.

This module does not parse requests, map errors to status codes (app.py) or check tokens (security.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

from openenv.core.env_server.types import WSErrorCode, WSErrorResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fathom.env import RLMEnvironment


class CapacityError(Exception):
    """Every session slot is taken."""


class UnknownSession(KeyError):
    """No live session has this id (never created, closed, or reaped)."""

    def __str__(self) -> str:
        return f"unknown session {self.args[0]!r}: it was never created, was closed, or expired"


@dataclass
class Session:
    id: str
    env: RLMEnvironment
    created: float
    last_used: float
    closed: bool = False
    # Steps of one session are serialised; a held lock also marks the session busy for the reaper.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionRegistry:
    """HTTP sessions plus a count of WebSocket connections, under one cap."""

    def __init__(
        self,
        max_sessions: int,
        idle_timeout_s: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        if idle_timeout_s is not None and idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be > 0 or None, got {idle_timeout_s}")
        self.max_sessions, self.idle_timeout_s, self.clock = max_sessions, idle_timeout_s, clock
        self._sessions: dict[str, Session] = {}
        self._pending = 0  # HTTP resets in progress: they hold a slot before their session exists
        self._websockets = 0
        # Every environment the server built (HTTP and WebSocket), so shutdown can close them all.
        self._envs: weakref.WeakSet[RLMEnvironment] = weakref.WeakSet()

    # ---- capacity --------------------------------------------------------------------------------
    @property
    def active(self) -> int:
        return len(self._sessions) + self._pending + self._websockets

    @property
    def websockets(self) -> int:
        return self._websockets

    def _take_slot(self) -> None:
        # No await between the check and the increment: slots are exact on one event loop.
        if self.active >= self.max_sessions:
            raise CapacityError(
                f"session limit reached: {self.active} of {self.max_sessions} sessions are open; "
                "close one (DELETE /session/{id}) or retry later"
            )

    def reserve(self) -> None:
        """Hold a slot for an HTTP reset that is about to build its environment."""
        self._take_slot()
        self._pending += 1

    def release_reservation(self) -> None:
        self._pending -= 1

    def open_websocket(self) -> None:
        self._take_slot()
        self._websockets += 1

    def close_websocket(self) -> None:
        self._websockets -= 1

    # ---- sessions --------------------------------------------------------------------------------
    def track(self, env: RLMEnvironment) -> None:
        self._envs.add(env)

    def add(self, env: RLMEnvironment) -> Session:
        """Turn a reservation into a live session."""
        self._pending -= 1
        now = self.clock()
        session = Session(id=uuid.uuid4().hex, env=env, created=now, last_used=now)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id)
        session.last_used = self.clock()
        return session

    def __len__(self) -> int:
        return len(self._sessions)

    async def close(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is None:
            raise UnknownSession(session_id)
        session.closed = True
        # Closing first interrupts a step in flight (it ends with end_reason "closed"); the lock then
        # waits until that step has returned.
        await session.env.aclose()
        async with session.lock:
            pass

    async def reap(self) -> list[str]:
        """Close sessions idle longer than the timeout; a session mid-step is never idle."""
        if self.idle_timeout_s is None:
            return []
        now = self.clock()
        stale = [
            s
            for s in self._sessions.values()
            if not s.lock.locked() and now - s.last_used > self.idle_timeout_s
        ]
        for s in stale:
            del self._sessions[s.id]
            s.closed = True
        await asyncio.gather(*(s.env.aclose() for s in stale))
        return [s.id for s in stale]

    async def run_reaper(self) -> None:
        """Reap until cancelled (started by the app's lifespan when a timeout is set)."""
        assert self.idle_timeout_s is not None
        interval = min(max(self.idle_timeout_s / 4, 0.05), 5.0)  # reaped within 1.25× the timeout
        while True:
            await asyncio.sleep(interval)
            await self.reap()

    async def close_all(self) -> None:
        """Close every session and every environment built for a WebSocket (server shutdown)."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for s in sessions:
            s.closed = True
        envs = {id(s.env): s.env for s in sessions} | {id(e): e for e in list(self._envs)}
        # aclose is idempotent: an environment OpenEnv already closed is a no-op here.
        await asyncio.gather(*(env.aclose() for env in envs.values()))


class WebSocketGate:
    """ASGI middleware: a WebSocket connection takes a session slot for its lifetime.

    At capacity the connection is accepted, sent OpenEnv's `CAPACITY_REACHED` error frame and closed
    (1013, try again later) — the same refusal OpenEnv's own server sends, which `EnvClient` reports as
    a server error. A client that sends nothing for the idle timeout is closed (1001) and its
    environment released; time spent inside a step does not count, only time waiting for the client.
    """

    def __init__(self, app: ASGIApp, registry: SessionRegistry) -> None:
        self.app, self.registry = app, registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            self.registry.open_websocket()
        except CapacityError as exc:
            await _refuse_websocket(receive, send, str(exc), self.registry)
            return
        try:
            await self.app(scope, *_idle_closing(receive, send, self.registry.idle_timeout_s))
        finally:
            self.registry.close_websocket()


async def _refuse_websocket(receive: Receive, send: Send, message: str, registry: SessionRegistry) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    error = WSErrorResponse(
        data={
            "message": message,
            "code": WSErrorCode.CAPACITY_REACHED,
            "active_sessions": registry.active,
            "max_sessions": registry.max_sessions,
        }
    )
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": error.model_dump_json()})
    await send({"type": "websocket.close", "code": 1013, "reason": "session limit reached"})


def _idle_closing(receive: Receive, send: Send, idle_timeout_s: float | None) -> tuple[Receive, Send]:
    """Wrap receive/send so a client silent for `idle_timeout_s` is closed and seen as disconnected."""
    if idle_timeout_s is None:
        return receive, send
    closed = False

    async def timed_receive() -> Message:
        nonlocal closed
        try:
            return await asyncio.wait_for(receive(), idle_timeout_s)
        except TimeoutError:
            closed = True
            with contextlib.suppress(RuntimeError, OSError):  # the client may be gone already
                await send({"type": "websocket.close", "code": 1001, "reason": "idle timeout"})
            return {"type": "websocket.disconnect", "code": 1001}

    async def guarded_send(message: Message) -> None:
        # The app closes the socket once more when it sees the disconnect; that close was ours.
        if closed and message["type"] == "websocket.close":
            return
        await send(message)

    return timed_receive, guarded_send
