"""How `fathom serve` is deployed: the Dockerfile runs the make target CI runs and the command these tests
start; openenv.yaml names an app that serves; the CLI parses its flags; and the server process leaves no
sandbox worker behind on session close, idle reap or shutdown."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import signal
import time

import httpx
import pytest
import yaml
from server_support import REPO, alive, descendants, running_server, server_process

from fathom.cli import build_parser
from fathom.env import OpenAISubLM, ScriptedSubLM
from fathom.policies.readers import keyword_reader
from fathom.server import FathomClient, FathomEnvClient, ServerConfig, ServerError, create_app
from fathom.server.cli import load_sub_lm, read_token
from fathom.server.security import OPEN_PATHS
from fathom.tasks import generate_task, load_tasks, write_tasks


def _dockerfile() -> list[tuple[str, str]]:
    """(instruction, argument) pairs, continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _make_targets() -> dict[str, list[str]]:
    targets = {}
    for match in re.finditer(r"^([a-z-]+):(.*)$", (REPO / "Makefile").read_text(), re.MULTILINE):
        targets[match.group(1)] = match.group(2).split()
    return targets


def test_dockerfile_runs_what_ci_runs():
    steps = _dockerfile()
    runs = [arg for op, arg in steps if op == "RUN"]
    make_calls = [shlex.split(r)[1:] for r in runs if r.startswith("make")]
    assert make_calls == [["setup"]]
    targets = _make_targets()
    assert "setup" in targets["test"]  # `make test`, CI's first step, runs the same set-up
    assert "make test" in (REPO / ".ci" / "run").read_text()
    other_runs = [r for r in runs if not r.startswith("make")]
    assert all(r.startswith(("apt-get", "chmod")) for r in other_runs), other_runs

    cmd = json.loads(next(arg for op, arg in steps if op == "CMD"))
    assert cmd[0] == "fathom"
    args = build_parser(cmd[1:]).parse_args(cmd[1:])  # the very parser `fathom` uses
    assert (args.command, args.host, args.port) == ("serve", "0.0.0.0", 8000)
    manifest = yaml.safe_load((REPO / "openenv.yaml").read_text())
    assert [arg for op, arg in steps if op == "EXPOSE"] == [str(args.port)] and manifest["port"] == args.port
    health = next(arg for op, arg in steps if op == "HEALTHCHECK")
    assert re.search(r"http://127\.0\.0\.1:8000(/\w+)", health).group(1) in OPEN_PATHS


def test_openenv_manifest_names_an_app_that_serves():
    manifest = yaml.safe_load((REPO / "openenv.yaml").read_text())
    assert {k: manifest[k] for k in ("spec_version", "name", "type", "runtime")} == {
        "spec_version": 1,
        "name": "fathom",
        "type": "space",
        "runtime": "fastapi",
    }
    module, attr = manifest["app"].split(":")
    app = getattr(importlib.import_module(module), attr)()  # a factory: uvicorn --factory
    with running_server(app) as url:
        assert httpx.get(f"{url}/health").json()["status"] == "healthy"
        paths = httpx.get(f"{url}/openapi.json").json()["paths"]
        assert {"/reset", "/step", "/state", "/healthz", "/schema", "/metadata"} <= set(paths)


def test_cli_flags(tmp_path):
    args = build_parser(["serve"]).parse_args(["serve"])
    assert (args.host, args.port, args.max_sessions, args.idle_timeout, args.sub_lm, args.pool) == (
        "127.0.0.1",
        8000,
        64,
        600.0,
        "none",
        4,
    )
    assert load_sub_lm("none") is None
    assert isinstance(load_sub_lm("expert"), ScriptedSubLM)
    scripted = load_sub_lm("scripted")
    assert isinstance(scripted, ScriptedSubLM) and scripted.fn is keyword_reader
    remote = load_sub_lm("openai:http://127.0.0.1:8001/v1:qwen-coder")
    assert isinstance(remote, OpenAISubLM) and remote.model == "qwen-coder"
    assert str(remote.client.base_url).rstrip("/") == "http://127.0.0.1:8001/v1"
    for bad in ("openai:qwen", "gpt", "openai:http://x/v1:"):
        with pytest.raises(ValueError, match="--sub-lm"):
            load_sub_lm(bad)
    (tmp_path / "token").write_text("abc\n")
    assert read_token(argparse.Namespace(token=None, token_file=tmp_path / "token")) == "abc"
    with pytest.raises(ValueError, match="not both"):
        read_token(argparse.Namespace(token="x", token_file=tmp_path / "token"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_token(argparse.Namespace(token=None, token_file=tmp_path / "empty"))


def test_keyword_reader_returns_the_matching_lines():
    chunk = "alpha beta\nthe magic number for brave-falcon is 42\nnothing here\nmagic words"
    assert keyword_reader("magic number for brave-falcon", chunk) == (
        "the magic number for brave-falcon is 42\nmagic words"
    )
    assert keyword_reader("zebra", chunk) == "(nothing relevant found)"


def _workers(pid: int, expected: int, timeout_s: float = 10) -> set[int]:
    """`pid`'s live descendants, once their count reaches `expected` (or the deadline passes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = alive(descendants(pid))
        if len(found) == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


WORKER_PROCESSES = 3  # a sandbox worker is bwrap -> bwrap (pid namespace init) -> python


def test_shutdown_closes_every_worker(task_file):
    """Sessions' workers and the pool's pre-started ones: all stopped by the server's own shutdown (this
    process, their parent, lives on; the server thread has just returned)."""
    tasks = load_tasks(task_file)
    before = alive(descendants(os.getpid()))
    config = ServerConfig(idle_timeout_s=None, pool_size=2)
    app = create_app(config, tasks=tasks)
    with running_server(app) as url:
        http = [FathomClient(url) for _ in range(2)]
        for client in http:
            client.reset(task_id=tasks[0].id)
        ws = FathomEnvClient(url).sync()
        ws.connect()
        ws.reset(task_id=tasks[0].id)
        # 3 sessions + the idle pool; forked by the pool's fork server, a worker is one process (plus the zygote)
        forked = app.state.pool._launcher.fork_server is not None
        new = (3 + config.pool_size) * (1 if forked else WORKER_PROCESSES) + forked
        workers = _workers(os.getpid(), len(before) + new) - before
        assert len(workers) == new
        assert http[0].step("```repl\nprint(len(ctx))\n```").cells[0].stdout == f"{len(tasks[0].document)}\n"
    assert alive(workers) == set()  # the server stopped with two HTTP sessions and a WebSocket open
    ws.close()


@pytest.fixture
def task_file(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", [generate_task("niah", 5, 2048)], docs_dir=None)
    return tmp_path / "tasks.jsonl"


def test_served_process_closes_workers_on_close_and_sigterm(task_file, tmp_path):
    task = load_tasks(task_file)[0]
    (tmp_path / "token").write_text("tok\n")
    log = tmp_path / "server.log"
    flags = [
        "--tasks",
        str(task_file),
        "--token-file",
        str(tmp_path / "token"),
        "--sub-lm",
        "scripted",
        "--pool",
        "0",
    ]
    with server_process(*flags, "--log-level", "warning", log=log) as (proc, url):
        with pytest.raises(ServerError, match="HTTP 401"):
            FathomClient(url).reset(task_id=task.id)
        a, b = FathomClient(url, token="tok"), FathomClient(url, token="tok")
        a.reset(task_id=task.id)
        b.reset(task_id=task.id)
        ws = FathomEnvClient(url, token="tok").sync()
        ws.connect()
        ws.reset(task_id=task.id)
        assert len(_workers(proc.pid, 3 * WORKER_PROCESSES)) == 3 * WORKER_PROCESSES

        a.close()  # closing a session stops its worker
        remaining = _workers(proc.pid, 2 * WORKER_PROCESSES)
        assert len(remaining) == 2 * WORKER_PROCESSES
        # llm() reaches the scripted sub-LM given on the command line
        turn = (
            "```repl\ni = ctx.find('special magic')\nprint(llm('special magic numbers', ctx[i:i + 200]))\n```"
        )
        assert "special magic numbers" in b.step(turn).cells[0].stdout

        proc.send_signal(signal.SIGTERM)  # with an HTTP session and a WebSocket still open
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        assert alive(remaining) == set()
        ws.close()
    assert "Traceback" not in log.read_text()
