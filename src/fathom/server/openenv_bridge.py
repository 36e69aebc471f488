"""OpenEnv's /ws and /mcp sessions inside FATHOM's session registry, and the guard on /ws frames.

OpenEnv's `HTTPEnvServer` makes a session for each /ws connection and for each ``openenv/session/create``
call on /mcp; the latter is then driven over ``/ws?session_id=``. `CountedEnvServer` is that server with
its session bookkeeping reported to `SessionRegistry`, so one cap counts them all:

- a new OpenEnv session takes a registry slot first (reclaiming a finished session at the cap), and is
  refused with OpenEnv's own `SessionCapacityError` shape when none is free;
- every way OpenEnv ends a session (close over /mcp, its /ws going, the registry's reaper or a reclaim)
  frees the slot;
- an /mcp session ends, with its sandbox worker, when the WebSocket that drove it goes.

`WebSocketGate` wraps every /ws connection: it notes which /mcp session the connection attaches to, answers
messages OpenEnv's endpoint would die on (a binary frame, JSON that is not an object) with OpenEnv's error
frame instead of ending the session, and closes a client silent for the idle timeout (time inside a step
does not count, only time waiting for the client).

The overrides rely on `HTTPEnvServer`'s private session methods (openenv 0.10): `_create_session`,
`_cleanup_session_resources` (every teardown path goes through it) and `_update_session_activity`
(called once a /ws connection attaches to a session, then on every reset and step). This module does
not run episodes or validate reset arguments (served.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from dataclasses import dataclass
from typing import Any

from openenv.core.env_server import HTTPEnvServer
from openenv.core.env_server.exceptions import SessionCapacityError
from openenv.core.env_server.types import WSErrorCode, WSErrorResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fathom.env import RLMEnvironment
from fathom.server.sessions import CapacityError, SessionRegistry


@dataclass
class _Connection:
    """One /ws connection: the /mcp session it attached to, if any."""

    attached: str | None = None


# The /ws connection the current task serves (None outside one): OpenEnv's hooks get no connection
# argument, and each connection runs in its own task, so its context is where the gate leaves it.
_CONNECTION: contextvars.ContextVar[_Connection | None] = contextvars.ContextVar("fathom_ws", default=None)


class CountedEnvServer(HTTPEnvServer):
    def __init__(self, *args: Any, registry: SessionRegistry, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry = registry
        registry.bind_openenv(self._destroy_session)

    async def _create_session(self) -> tuple[str, Any]:
        try:
            await self.registry.reserve()
        except CapacityError as exc:
            raise SessionCapacityError(self.registry.active, self.registry.max_sessions, str(exc)) from exc
        try:
            session_id, env = await super()._create_session()
        except BaseException:
            self.registry.release_reservation()
            raise
        kind = "mcp" if _CONNECTION.get() is None else "websocket"
        self.registry.adopt(session_id, env, kind)
        return session_id, env

    async def _cleanup_session_resources(self, env: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(env, RLMEnvironment):
            self.registry.drop_openenv(env)
        await super()._cleanup_session_resources(env, *args, **kwargs)

    def _update_session_activity(self, session_id: str, increment_step: bool = False) -> None:
        super()._update_session_activity(session_id, increment_step)
        self.registry.touch(session_id)
        connection, session = _CONNECTION.get(), self.registry.openenv_session(session_id)
        if connection is not None and session is not None and session.kind == "mcp":
            connection.attached, session.attached = session_id, True


class WebSocketGate:
    """ASGI middleware around every /ws connection (see the module docstring)."""

    def __init__(self, app: ASGIApp, registry: SessionRegistry) -> None:
        self.app, self.registry = app, registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        connection = _Connection()
        token = _CONNECTION.set(connection)
        receive, send = _idle_closing(receive, send, self.registry.idle_timeout_s)
        try:
            await self.app(scope, _checked_frames(receive, send), send)
        finally:
            _CONNECTION.reset(token)
            if connection.attached is not None:
                # Shielded: a server shutting down cancels this task, and the worker must still go.
                await asyncio.shield(self.registry.end_openenv(connection.attached))


def _error_frame(message: str, code: WSErrorCode) -> Message:
    error = WSErrorResponse(data={"message": message, "code": code})
    return {"type": "websocket.send", "text": error.model_dump_json()}


_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


def _not_an_object(text: str) -> str | None:
    """Why a text frame is no OpenEnv message, or None to let OpenEnv's endpoint answer it."""
    if text.lstrip()[:1] == "{":
        return None  # an object, or broken JSON that OpenEnv reports as INVALID_JSON itself
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    kind = "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)
    return f"a message must be a JSON object, got {kind}: send {{'type': ..., 'data': {{...}}}}"


def _checked_frames(receive: Receive, send: Send) -> Receive:
    """Answer frames OpenEnv's endpoint would end the session on, and hand it only the others."""

    async def checked_receive() -> Message:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return message
            text = message.get("text")
            if text is None:
                problem = "send messages as text frames: this server reads JSON text, not binary data"
            else:
                problem = _not_an_object(text)
            if problem is None:
                return message
            # The endpoint is waiting in receive(), so this reply cannot interleave with one of its own.
            await send(_error_frame(problem, WSErrorCode.INVALID_JSON))

    return checked_receive


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
