"""Helpers for the server tests: a real uvicorn server on an ephemeral loopback port (in a thread or a
subprocess), scripted niah turns, and trajectory normalisation for comparing runs."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from fathom.env import RLMObservation
from fathom.server import uvicorn_config
from fathom.tasks import Task

REPO = Path(__file__).resolve().parents[2]
QUESTION_KEY = re.compile(r"special magic number for ([a-z]+-[a-z]+) mentioned")


@contextlib.contextmanager
def running_server(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn in a thread on 127.0.0.1:<ephemeral>; yields the base URL."""
    config = (
        uvicorn_config(app, "127.0.0.1", 0, log_level="warning")
        if hasattr(app.state, "config")  # a `fathom serve` app; others (serve-lm) take uvicorn's defaults
        else uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "uvicorn did not shut down"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def server_process(*args: str, log: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`python -m fathom serve` as a subprocess on a free loopback port, its output to `log`;
    yields (process, base URL)."""
    port = free_port()
    cmd = [sys.executable, "-m", "fathom", "serve", "--host", "127.0.0.1", "--port", str(port), *args]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"server at {url} not healthy after {timeout_s} s")


def niah_turns(task: Task) -> list[str]:
    """A fixed grep-and-FINAL episode for a niah task, with a turn of every kind the env renders:
    output, an error, no code block, an llm() sub-call, and the answer."""
    key = QUESTION_KEY.search(task.question).group(1)
    return [
        "Let me look.\n```repl\nprint(len(ctx))\nprint(ctx[:60])\n```",
        "```repl\n1/0\n```",
        "I am thinking about it.",
        "```repl\nimport re\n"
        f"hits = re.findall(r'magic numbers for {key} is: (\\d{{7}})', ctx)\n"
        "i = ctx.find(hits[0])\n"
        f"print(hits, llm('magic number for {key}', ctx[max(0, i - 300):i + 20]))\n```",
        "```repl\nFINAL(hits[0])\n```",
    ]


def normalise(observation: RLMObservation) -> dict[str, Any]:
    """An observation without what legitimately differs between runs (timings, metadata)."""
    data = observation.model_dump(exclude={"metadata"})
    for record in data["cells"] + data["subcalls"]:
        record.pop("elapsed_s")
    return data


def descendants(pid: int) -> set[int]:
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    return set()


def alive(pids: set[int]) -> set[int]:
    import psutil

    out = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
    return out
