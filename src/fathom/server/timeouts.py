"""Slow clients: a connection must send each request head within a time limit, or it is closed.

uvicorn times out a connection only between requests (``timeout_keep_alive``, armed once a response is
sent): a client that connects and sends nothing, or half a request head, holds its connection open for
ever. `head_timeout_protocol` gives uvicorn's httptools protocol a deadline for every request head,
armed when the connection opens and again after every response, and disarmed when a head is complete;
at the deadline a connection with no request in flight is closed. The body that follows a head is the
ASGI side's to time (`security.BodyLimit` answers 408 when the body stops arriving).

This module does not limit sizes (security.py) or anything a request does once it is read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def head_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol, closing a connection that has not sent its request head in time."""
    if timeout_s <= 0:
        raise ValueError(f"the request-head timeout must be > 0, got {timeout_s}")

    class HeadTimeoutProtocol(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # the next request's head has the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._head_timer = self.loop.call_later(timeout_s, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a pipelined request is being served: its head arrived
            if not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutProtocol
