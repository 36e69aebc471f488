"""The web demo of `fathom serve`: a page that runs an episode and shows it live, and a trace browser.

`mount_demo` adds to the app:

- ``GET /`` (redirects to ``/demo``), ``GET /demo`` (the page) and ``/demo/static/*`` (its CSS and JS:
  plain files shipped with the package, no build step, nothing fetched from elsewhere);
- ``GET /demo/api/options``: families, lengths and policies the page may offer;
- ``POST /demo/api/run``: one episode (`demo_runs.RunRequest`; its task built on the demo's own two
  threads, never on the pool that sessions need) streamed as server-sent events —
  ``task``, ``start``, one ``turn`` per model turn, ``end`` (or ``error``) — each ``data`` a JSON object;
  the episode takes a session slot (`SessionRegistry`) and stops when the page goes away;
- ``GET /demo/api/runs``, ``/demo/api/traces?file=&offset=&limit=``, ``/demo/api/trace?file=&line=``: the
  trace files under ``--runs DIR``, their lines, and one line as the viewer shows it (`traces.trace_view`).

The page escapes everything it shows (text nodes only) and is served with a Content-Security-Policy that
allows no inline script, because model output and documents are adversarial. Behind ``--token`` these
routes need the token like every other route, so a browser cannot use them: the demo is meant for a
loopback server. This module does not run episodes (demo_runs.py) or read trace files (traces.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from fathom.env import EnvConfig, RLMEnvironment, SubLM
from fathom.server.demo_runs import (
    EXPERT_TOKENIZER,
    DemoModel,
    RunRequest,
    build_task,
    stream_episode,
)
from fathom.server.served import InvalidTask
from fathom.server.sessions import SessionRegistry
from fathom.server.traces import (
    TraceFormatError,
    TraceNotFound,
    find_trace_files,
    read_trace,
    resolve_trace_file,
    summaries,
)
from fathom.tasks import DIFFICULTIES, FAMILIES

STATIC = Path(__file__).parent / "static"
LENGTHS = (2048, 8192, 32768, 131072, 1048576)
MAX_LINE = 10**9  # a line number past any trace file; itertools.islice refuses numbers over 2**63 - 1
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DemoConfig:
    runs_dir: Path | None = None  # where the trace browser looks (`--runs DIR`); None: no browser
    model: DemoModel | None = None  # the ``model`` policy (`--demo-model NAME`); None: expert only


class _ExpertChat:
    """The expert's chat format, loaded once (transformers takes seconds to import) and shared."""

    def __init__(self) -> None:
        self._chat: Any = None
        self._lock = asyncio.Lock()
        self._warming: asyncio.Future[Any] | None = None

    async def get(self) -> Any:
        async with self._lock:
            if self._chat is None:
                self._chat = await asyncio.to_thread(_load_chat, EXPERT_TOKENIZER)
            return self._chat

    def warm(self) -> None:
        """Start loading now (the page asks for its options first), so the first run does not wait."""
        if self._warming is None:
            self._warming = asyncio.ensure_future(self.get())


def _load_chat(name: str) -> Any:
    from fathom.models import ModelSpec, load_tokenizer
    from fathom.rollout import ChatFormat

    return ChatFormat(load_tokenizer(ModelSpec(name=name)))


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode()


def mount_demo(
    app: FastAPI,
    registry: SessionRegistry,
    env_config: EnvConfig,
    max_length_tokens: int,
    demo: DemoConfig,
) -> ThreadPoolExecutor:
    """Add the demo page and its API to `app` (its sandbox pool, if any, is read from ``app.state``).

    Returns the demo's own executor, which builds tasks (generators, family solvers) off the default one
    that sessions' resets use; the caller shuts it down with the server."""
    expert_chat = _ExpertChat()
    # Two threads: a few demo requests at once may build tasks, and no number of them reaches the pool
    # that session resets parse their documents on.
    tasks = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fathom-demo-task")
    router = APIRouter(tags=["web demo"])

    def make_env(config: EnvConfig, sub_lm: SubLM) -> RLMEnvironment:
        env = RLMEnvironment(config, sub_lm=sub_lm, pool=app.state.pool)
        registry.track(env)  # closed on server shutdown like every session's environment
        return env

    @router.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/demo")

    @router.get("/demo", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "demo.html", headers={"Content-Security-Policy": CSP})

    @router.get("/demo/api/options")
    async def options() -> dict[str, Any]:
        expert_chat.warm()
        policies = [{"id": "expert", "label": "expert (scripted)"}]
        if demo.model is not None:
            policies.append({"id": "model", "label": f"model: {demo.model.name} (CPU)"})
        return {
            "families": [{"name": n, "summary": f.summary} for n, f in FAMILIES.items()],
            "lengths": [n for n in LENGTHS if n <= max_length_tokens],
            "difficulties": list(DIFFICULTIES),
            "policies": policies,
            "runs": demo.runs_dir is not None,
        }

    @router.post("/demo/api/run")
    async def run(body: RunRequest) -> StreamingResponse:
        """One episode as server-sent events: task, start, turn..., end (or error)."""
        if body.policy == "model" and demo.model is None:
            raise InvalidTask("no model policy: start the server with --demo-model NAME")
        task = await asyncio.get_running_loop().run_in_executor(tasks, build_task, body, max_length_tokens)
        await registry.reserve()  # a demo episode holds a sandbox like a session does
        episode = stream_episode(body, task, expert_chat.get, demo.model, make_env, env_config)
        return StreamingResponse(
            _events(episode, registry.release_reservation),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @router.get("/demo/api/runs")
    async def runs() -> dict[str, Any]:
        root = _runs_root(demo)
        files = await asyncio.to_thread(find_trace_files, root)
        return {"root": str(root), "files": files}

    @router.get("/demo/api/traces")
    async def traces(
        file: str, offset: int = Query(0, ge=0, le=MAX_LINE), limit: int = Query(50, ge=1, le=500)
    ) -> dict[str, Any]:
        path = _trace_file(demo, file)
        rows = await asyncio.to_thread(summaries, path, offset, limit)
        return {"file": file, "offset": offset, "rows": rows}

    @router.get("/demo/api/trace")
    async def trace(file: str, line: int = Query(ge=0, le=MAX_LINE)) -> dict[str, Any]:
        path = _trace_file(demo, file)
        try:
            return await asyncio.to_thread(read_trace, path, line)
        except TraceNotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        except TraceFormatError as exc:
            raise HTTPException(422, f"{file}: {exc}") from exc

    app.mount("/demo/static", StaticFiles(directory=STATIC), name="demo-static")
    app.include_router(router)
    return tasks


async def _events(
    episode: AsyncIterator[tuple[str, dict[str, Any]]], release: Callable[[], None]
) -> AsyncIterator[bytes]:
    try:
        async for event, data in episode:
            yield _sse(event, data)
    except Exception as exc:
        # The response has started (status 200): the page can only learn of a failure from the stream.
        # The episode's own failures are already data (an "error" end reason); this is a server bug.
        log.exception("demo episode failed")
        yield _sse("error", {"detail": f"{type(exc).__name__}: {exc}"})
    finally:
        await episode.aclose()  # type: ignore[attr-defined]
        release()


def _runs_root(demo: DemoConfig) -> Path:
    if demo.runs_dir is None:
        raise HTTPException(404, "no runs folder: start the server with --runs DIR to browse traces")
    return demo.runs_dir


def _trace_file(demo: DemoConfig, name: str) -> Path:
    try:
        return resolve_trace_file(_runs_root(demo), name)
    except TraceNotFound as exc:
        raise HTTPException(404, str(exc)) from exc
