"""`fathom serve`: the RLM environment over HTTP and WebSocket on OpenEnv's contract, and its clients.

The app (`create_app`) lives in `app.py`, sessions and their cap in `sessions.py` (OpenEnv's /ws and
/mcp sessions reach it through `openenv_bridge.py`), the token, body-size and stalled-body guards in
`security.py`, the request-head timeout in `timeouts.py`, the server's input policy in `served.py`, the
wire messages in `protocol.py`, the clients in `client.py` and the command line in `cli.py`. Nothing here
changes what an episode does (that is `fathom.env`), except that a served step's tokens are counted
from its text, not taken from the client.

Names are imported on first use, so `fathom --help` does not pay for importing the web stack.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "AsyncFathomClient": "fathom.server.client",
    "FathomClient": "fathom.server.client",
    "FathomEnvClient": "fathom.server.client",
    "ServerError": "fathom.server.client",
    "ServerConfig": "fathom.server.app",
    "create_app": "fathom.server.app",
    "uvicorn_config": "fathom.server.app",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'fathom.server' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
