"""Session bookkeeping of `fathom serve`: who holds an environment, for how long, and cleaning up after.

`SessionRegistry` holds every session under one cap:

- ``http``: FATHOM's session-keyed HTTP sessions (one `RLMEnvironment` each, with a lock that serialises
  its steps), created by ``POST /reset`` and found by id;
- ``websocket`` and ``mcp``: the sessions OpenEnv's `HTTPEnvServer` makes for a /ws connection or an
  ``openenv/session/create`` call on /mcp (`fathom.server.openenv_bridge` reports them here);
- reservations: an HTTP reset or a demo episode that is building its environment.

When every slot is taken, a session whose episode is over and that nobody is using (no step in flight,
no WebSocket attached) is reclaimed, the least recently used first, before a newcomer is refused. The
reaper closes HTTP sessions and unattached /mcp sessions idle longer than the timeout (a session mid-step
or driven by a WebSocket is never idle). On shutdown every environment the server built is closed, so
no sandbox worker outlives the server.

This module does not parse requests, map errors to status codes (app.py), speak OpenEnv's /ws protocol
(openenv_bridge.py) or check tokens (security.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

from fathom.env import RLMEnvironment

SessionKind = Literal["http", "websocket", "mcp"]


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
    kind: SessionKind = "http"
    closed: bool = False
    attached: bool = False  # an /mcp session a WebSocket drives now: neither idle nor reclaimable
    # Steps of one session are serialised; a held lock also marks the session busy for the reaper.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class SessionRegistry:
    """Every session (HTTP, /ws, /mcp) and every reservation, under one cap."""

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
        self._sessions: dict[str, Session] = {}  # HTTP sessions, by id
        self._openenv: dict[str, Session] = {}  # sessions OpenEnv holds (/ws and /mcp), by OpenEnv's id
        self._pending = 0  # resets in progress: they hold a slot before their session exists
        # Ends an OpenEnv session (its environment and worker); set by the bridge that reports them.
        self._destroy_openenv: Callable[[str], Awaitable[None]] | None = None
        # Every environment the server built (HTTP and OpenEnv), so shutdown can close them all.
        self._envs: weakref.WeakSet[RLMEnvironment] = weakref.WeakSet()

    # ---- capacity --------------------------------------------------------------------------------
    @property
    def active(self) -> int:
        return len(self._sessions) + len(self._openenv) + self._pending

    def count(self, kind: SessionKind) -> int:
        if kind == "http":
            return len(self._sessions)
        return sum(s.kind == kind for s in self._openenv.values())

    def _reclaimable(self) -> Session | None:
        """The least recently used session whose episode is over and that nobody is using."""
        idle_http = (s for s in self._sessions.values() if not s.lock.locked())
        idle_mcp = (s for s in self._openenv.values() if s.kind == "mcp" and not s.attached)
        over = [s for s in (*idle_http, *idle_mcp) if s.env.state.done]
        return min(over, key=lambda s: s.last_used, default=None)

    async def reserve(self) -> None:
        """Hold a slot for a session about to build its environment; release it with
        `release_reservation` or turn it into a session with `add` / `adopt`."""
        # No await between the check and the increment: slots are exact on one event loop.
        victim = None
        if self.active >= self.max_sessions:
            victim = self._reclaimable()
            if victim is None:
                raise CapacityError(
                    f"session limit reached: {self.active} of {self.max_sessions} sessions are open; "
                    "close one (DELETE /session/{id}) or retry later"
                )
            self._forget(victim)
        self._pending += 1
        if victim is not None:
            try:
                await self._dispose(victim)
            except BaseException:
                self._pending -= 1
                raise

    def release_reservation(self) -> None:
        self._pending -= 1

    def _forget(self, session: Session) -> None:
        session.closed = True
        table = self._sessions if session.kind == "http" else self._openenv
        table.pop(session.id, None)

    async def _dispose(self, session: Session) -> None:
        """Close a session already forgotten: its environment, and for OpenEnv's, OpenEnv's record."""
        if session.kind == "http":
            # Closing first interrupts a step in flight (it ends with end_reason "closed"); the lock then
            # waits until that step has returned.
            await session.env.aclose()
            async with session.lock:
                pass
            return
        assert self._destroy_openenv is not None, "OpenEnv sessions are reported by the bridge"
        await self._destroy_openenv(session.id)

    # ---- HTTP sessions ---------------------------------------------------------------------------
    def track(self, env: RLMEnvironment) -> None:
        self._envs.add(env)

    def add(self, env: RLMEnvironment) -> Session:
        """Turn a reservation into a live HTTP session."""
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
        session = self._sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id)
        self._forget(session)
        await self._dispose(session)

    # ---- OpenEnv sessions ------------------------------------------------------------------------
    def bind_openenv(self, destroy: Callable[[str], Awaitable[None]]) -> None:
        self._destroy_openenv = destroy

    def adopt(self, session_id: str, env: RLMEnvironment, kind: SessionKind) -> None:
        """Turn a reservation into a session OpenEnv made (for a /ws connection or an /mcp call)."""
        self._pending -= 1
        now = self.clock()
        self._openenv[session_id] = Session(session_id, env, now, now, kind=kind)

    def openenv_session(self, session_id: str) -> Session | None:
        return self._openenv.get(session_id)

    def touch(self, session_id: str) -> None:
        if (session := self._openenv.get(session_id)) is not None:
            session.last_used = self.clock()

    def drop_openenv(self, env: RLMEnvironment) -> None:
        """OpenEnv ended the session holding `env` (closed, reaped, or its /ws went): free its slot."""
        gone = [s for s in self._openenv.values() if s.env is env]
        for session in gone:
            self._forget(session)

    async def end_openenv(self, session_id: str) -> None:
        """End an OpenEnv session now (its driving WebSocket went); a no-op if it has already ended."""
        session = self._openenv.get(session_id)
        if session is not None:
            self._forget(session)
            await self._dispose(session)

    # ---- reaping and shutdown --------------------------------------------------------------------
    async def reap(self) -> list[str]:
        """Close sessions idle longer than the timeout; a session mid-step or attached is never idle.

        /ws sessions are not reaped here: the WebSocket's own idle timeout closes a silent client."""
        if self.idle_timeout_s is None:
            return []
        now = self.clock()
        http = [s for s in self._sessions.values() if not s.lock.locked()]
        mcp = [s for s in self._openenv.values() if s.kind == "mcp" and not s.attached]
        stale = [s for s in (*http, *mcp) if now - s.last_used > self.idle_timeout_s]
        for s in stale:
            self._forget(s)
        await asyncio.gather(*(self._dispose(s) for s in stale))
        return [s.id for s in stale]

    async def run_reaper(self) -> None:
        """Reap until cancelled (started by the app's lifespan when a timeout is set)."""
        assert self.idle_timeout_s is not None
        interval = min(max(self.idle_timeout_s / 4, 0.05), 5.0)  # reaped within 1.25× the timeout
        while True:
            await asyncio.sleep(interval)
            await self.reap()

    async def close_all(self) -> None:
        """Close every session and every environment built for OpenEnv (server shutdown)."""
        sessions = [*self._sessions.values(), *self._openenv.values()]
        self._sessions, self._openenv = {}, {}
        for s in sessions:
            s.closed = True
        envs = {id(s.env): s.env for s in sessions} | {id(e): e for e in list(self._envs)}
        # aclose is idempotent: an environment OpenEnv already closed is a no-op here.
        await asyncio.gather(*(env.aclose() for env in envs.values()))
