"""The `fathom serve` application: the RLM environment over HTTP and WebSocket, on OpenEnv's contract.

`create_app` builds one FastAPI app that serves

- OpenEnv's own surface, registered by `openenv`'s `HTTPEnvServer` in production mode: the `/ws`
  session protocol (what `EnvClient` speaks), `/health`, `/schema`, `/metadata`, `/mcp`;
- FATHOM's session-keyed HTTP routes, which take the paths OpenEnv's production mode leaves free:
  ``POST /reset`` → a new session, ``POST /step``, ``GET /state``, ``DELETE /session/{id}``,
  ``GET /sessions`` (slot counts) and ``GET /healthz``;
- the web demo (`fathom.server.demo`): the page at ``/`` and ``/demo``, live episodes, the trace browser.

HTTP sessions and OpenEnv's /ws and /mcp sessions share one cap (`SessionRegistry`, which OpenEnv's
server reports to through `openenv_bridge.CountedEnvServer`); the idle reaper and the shutdown cleanup
run from the app's lifespan, so every sandbox worker is closed on session close, idle reap and server
shutdown. Bad input is a 4xx with a ``{"detail": ...}`` message and touches no other
session. `uvicorn_config` gives the ASGI-server settings that go with an app (WebSocket size cap, request-head
timeout, graceful shutdown). This module does not parse the command line (cli.py) or run the environment's logic.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from fathom.env import EnvConfig, RLMAction, RLMObservation, RLMState, SubLM, TaskNotFound
from fathom.sandbox import SandboxPool
from fathom.server.demo import DemoConfig, mount_demo
from fathom.server.openenv_bridge import CountedEnvServer, WebSocketGate
from fathom.server.protocol import (
    CloseResponse,
    HealthResponse,
    ResetRequest,
    ResetResponse,
    SessionsResponse,
    StepRequest,
    StepResponse,
    describe_errors,
)
from fathom.server.security import BearerAuth, BodyLimit
from fathom.server.served import InvalidTask, ServedEnvironment
from fathom.server.sessions import CapacityError, SessionRegistry, UnknownSession
from fathom.server.timeouts import head_timeout_protocol
from fathom.tasks import Task

ENV_NAME = "fathom"


@dataclass(frozen=True)
class ServerConfig:
    """What a server allows; `env` is the configuration of every episode it runs."""

    max_sessions: int = 64  # HTTP, /ws and /mcp sessions open at once
    idle_timeout_s: float | None = 600.0  # None: sessions live until closed
    token: str | None = None  # None: no bearer token required
    max_body_bytes: int = 64 * 2**20  # an inline task carries its document: 1M tokens is ~4-5 MB
    max_length_tokens: int = 2_000_000  # largest document a client may ask a generator for
    pool_size: int = 0  # sandbox workers kept pre-started (0: spawn one per reset, ~50 ms)
    client_timeout_s: float = 10.0  # to send a request head, and at most between two pieces of a body
    env: EnvConfig = field(default_factory=EnvConfig)


def create_app(
    config: ServerConfig | None = None,
    sub_lm: SubLM | None = None,
    tasks: Sequence[Task] | None = None,
    demo: DemoConfig | None = None,
) -> FastAPI:
    config = config or ServerConfig()
    registry = SessionRegistry(config.max_sessions, config.idle_timeout_s)
    task_list = list(tasks or ())

    def make_env() -> ServedEnvironment:
        env = ServedEnvironment(
            config.env,
            sub_lm=sub_lm,
            tasks=task_list,
            pool=app.state.pool,
            max_length_tokens=config.max_length_tokens,
        )
        registry.track(env)
        return env

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if config.pool_size:
            # On the serving loop's thread: pooled workers die with the thread that spawned them.
            # uvicorn owns SIGTERM; the pool is closed below like everything else.
            pool = SandboxPool(config.env.sandbox, size=config.pool_size, handle_signals=False)
            app.state.pool = await pool.open()
        reaper = asyncio.create_task(registry.run_reaper()) if config.idle_timeout_s is not None else None
        try:
            yield
        finally:
            if reaper is not None:
                reaper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reaper
            await registry.close_all()
            if app.state.pool is not None:
                await app.state.pool.close()
            demo_tasks.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="FATHOM environment server",
        version="1.0.0",
        description=__doc__,
        lifespan=lifespan,
    )
    app.state.registry = registry
    app.state.config = config
    app.state.pool = None  # a SandboxPool while serving, when config.pool_size > 0
    CountedEnvServer(
        make_env,
        RLMAction,
        RLMObservation,
        # The registry holds the cap; OpenEnv's own count is a backstop above it, since a session being
        # torn down stays in OpenEnv's table after its slot is free.
        max_concurrent_envs=2 * config.max_sessions,
        env_name=ENV_NAME,
        state_cls=RLMState,
        registry=registry,
    ).register_routes(app, mode="production")  # explicit: OPENENV_MODE must not change our routes

    _add_error_handlers(app)
    _add_session_routes(app, registry, make_env)
    demo_tasks = mount_demo(app, registry, config.env, config.max_length_tokens, demo or DemoConfig())
    # Added last = outermost: auth first, then the body cap, then the /ws connection guard.
    app.add_middleware(WebSocketGate, registry=registry)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes, idle_s=config.client_timeout_s)
    if config.token is not None:
        app.add_middleware(BearerAuth, token=config.token)
    return app


def uvicorn_config(
    app: FastAPI, host: str = "127.0.0.1", port: int = 8000, **overrides: Any
) -> uvicorn.Config:
    server_config: ServerConfig = app.state.config
    settings: dict[str, Any] = {
        "host": host,
        "port": port,
        "ws_max_size": server_config.max_body_bytes,  # WebSocket frames get the same cap as bodies
        "http": head_timeout_protocol(server_config.client_timeout_s),  # no half-sent request heads
        "timeout_graceful_shutdown": 10,  # then the lifespan closes whatever is left
        "log_level": "warning",
        "lifespan": "on",
    }
    return uvicorn.Config(app, **(settings | overrides))


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        content_type = request.headers.get("content-type", "")
        if request.method == "POST" and not content_type.startswith("application/json"):
            # FastAPI only parses JSON bodies declared as JSON; say so instead of "not a dict".
            return _error(
                415, f"send the body as JSON with 'Content-Type: application/json' (got {content_type!r})"
            )
        broken = next((e for e in errors if e["type"] == "json_invalid"), None)
        if broken is not None:
            reason = (broken.get("ctx") or {}).get("error", broken["msg"])
            return _error(400, f"malformed JSON at position {broken['loc'][-1]}: {reason}")
        return _error(422, "invalid request: " + describe_errors(errors))

    async def unknown_session(_: Request, exc: Exception) -> JSONResponse:
        return _error(404, str(exc))

    async def unknown_task(_: Request, exc: Exception) -> JSONResponse:
        return _error(404, str(exc.args[0]))  # KeyError's str() would add quotes

    async def invalid_task(_: Request, exc: Exception) -> JSONResponse:
        return _error(422, str(exc))

    async def at_capacity(_: Request, exc: Exception) -> JSONResponse:
        return _error(429, str(exc), {"Retry-After": "1"})

    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(UnknownSession, unknown_session)
    app.add_exception_handler(CapacityError, at_capacity)
    app.add_exception_handler(TaskNotFound, unknown_task)
    app.add_exception_handler(InvalidTask, invalid_task)


def _add_session_routes(
    app: FastAPI, registry: SessionRegistry, make_env: Callable[[], ServedEnvironment]
) -> None:
    @app.post("/reset", response_model=ResetResponse, tags=["FATHOM sessions"])
    async def reset(body: ResetRequest) -> ResetResponse:
        """Start an episode in a new session; the reply carries its `session_id`."""
        await registry.reserve()
        env = make_env()
        try:
            observation = await env.reset_async(**body.model_dump(exclude_none=True))
        except BaseException:
            registry.release_reservation()
            await env.aclose()
            raise
        session = registry.add(env)
        return ResetResponse(session_id=session.id, observation=observation)

    @app.post("/step", response_model=StepResponse, tags=["FATHOM sessions"])
    async def step(body: StepRequest) -> StepResponse:
        """Run one model turn; steps of one session run one at a time, in arrival order."""
        session = registry.get(body.session_id)
        async with session.lock:
            if session.closed:  # closed while this request waited for the lock
                raise UnknownSession(body.session_id)
            if session.env.state.done:
                raise HTTPException(409, "the episode is over: POST /reset starts a new one")
            observation = await session.env.step_async(body.action)
            session.last_used = registry.clock()
        return StepResponse(observation=observation, reward=observation.reward, done=observation.done)

    @app.get("/state", response_model=RLMState, tags=["FATHOM sessions"])
    async def state(session_id: str) -> RLMState:
        return registry.get(session_id).env.state

    @app.delete("/session/{session_id}", response_model=CloseResponse, tags=["FATHOM sessions"])
    async def close(session_id: str) -> CloseResponse:
        """End a session and stop its sandbox worker (waits for a step in flight)."""
        await registry.close(session_id)
        return CloseResponse(session_id=session_id, closed=True)

    @app.get("/sessions", response_model=SessionsResponse, tags=["FATHOM sessions"])
    async def sessions() -> SessionsResponse:
        return SessionsResponse(
            active=registry.active,
            http=registry.count("http"),
            websocket=registry.count("websocket"),
            mcp=registry.count("mcp"),
            max_sessions=registry.max_sessions,
        )

    @app.get("/healthz", response_model=HealthResponse, tags=["FATHOM sessions"])
    async def healthz() -> HealthResponse:
        return HealthResponse(status="ok")
