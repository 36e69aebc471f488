"""ASGI middleware guarding `fathom serve`: an optional bearer token, a cap on request-body size and a
limit on how long a body may stall.

`BearerAuth` checks ``Authorization: Bearer <token>`` on every HTTP request and WebSocket handshake
except the liveness probes, in constant time; a WebSocket without it is refused before the handshake
(HTTP 401 where the server supports denial responses). `BodyLimit` refuses a body over the cap with 413 —
at once when Content-Length says so, and while streaming for a chunked body that declares no length —
so an oversized request never reaches a route; a body that stops arriving for `idle_s` gets 408 and its
connection is closed. WebSocket message size is capped by the ASGI server (uvicorn's ``ws_max_size``,
set in `app.uvicorn_config`); a request head that never completes is timed in `timeouts.py`.

This module knows nothing of sessions or environments.
"""

from __future__ import annotations

import asyncio
import hmac
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Probes stay open: a load balancer or Space health check carries no token, and they reveal nothing.
OPEN_PATHS = frozenset({"/healthz", "/health"})


async def send_json_error(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] = ()
) -> None:
    """A complete JSON error response (FastAPI's ``{"detail": ...}`` shape) sent from middleware."""
    body = json.dumps({"detail": detail}).encode()
    start_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*start_headers, *headers]})
    await send({"type": "http.response.body", "body": body})


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("an empty bearer token would let anyone in: pass None to disable auth")
        self.app = app
        self._expected = b"Bearer " + token.encode()

    def _authorized(self, scope: Scope) -> bool:
        header = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
        return hmac.compare_digest(header, self._expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] not in ("http", "websocket")
            or scope["path"] in OPEN_PATHS
            or self._authorized(scope)
        ):
            await self.app(scope, receive, send)
            return
        detail = "missing or invalid bearer token (send 'Authorization: Bearer <token>')"
        challenge = [(b"www-authenticate", b"Bearer")]
        if scope["type"] == "http":
            await send_json_error(send, 401, detail, challenge)
        elif "websocket.http.response" in scope.get("extensions", {}):
            await send_json_error(_as_websocket_denial(send), 401, detail, challenge)
        else:  # no denial-response support: closing before accept makes the server answer 403
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})


def _as_websocket_denial(send: Send) -> Send:
    """Re-type http.response.* messages as the ASGI WebSocket denial-response extension wants them."""

    async def denial_send(message: Message) -> None:
        await send({**message, "type": "websocket." + message["type"]})

    return denial_send


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int, idle_s: float | None = None) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        if idle_s is not None and idle_s <= 0:
            raise ValueError(f"idle_s must be > 0 or None, got {idle_s}")
        self.app, self.max_bytes, self.idle_s = app, max_bytes, idle_s

    def _too_large(self) -> str:
        return f"request body too large: the limit is {self.max_bytes:,} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if declared is not None:
            if not declared.isdigit():
                await send_json_error(
                    send, 400, f"invalid Content-Length header: {declared.decode(errors='replace')!r}"
                )
                return
            if int(declared) > self.max_bytes:
                await send_json_error(send, 413, self._too_large())
                return
        # Read the whole body here, bounded by the cap (routes read it whole anyway), then replay it.
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            try:
                message = await asyncio.wait_for(receive(), self.idle_s)
            except TimeoutError:
                detail = f"request body not received: nothing arrived for {self.idle_s:g} s"
                await send_json_error(send, 408, detail, [(b"connection", b"close")])
                return
            if message["type"] == "http.disconnect":
                return  # the client left mid-body: there is nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await send_json_error(send, 413, self._too_large())
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        await self.app(scope, _replay(b"".join(chunks), receive), send)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay_receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body, only a disconnect can come

    return replay_receive
