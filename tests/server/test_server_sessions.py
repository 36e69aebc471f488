"""Every session counts, against a real `fathom serve` on loopback: sessions made through OpenEnv's /mcp
(`openenv/session/create`, then driven over ``/ws?session_id=``) are counted by /sessions and the cap,
released with their sandbox worker when their WebSocket goes or when they sit idle, and never lock new
/ws clients out; at the cap, sessions whose episode is over are reclaimed before a client is refused."""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
from server_support import alive, descendants, running_server
from websockets.sync.client import connect

from fathom.server import FathomClient, FathomEnvClient, ServerConfig, create_app
from fathom.tasks import generate_task


@pytest.fixture(scope="module")
def task():
    return generate_task("niah", 5, 2048)


def mcp(base: str, method: str, **params) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    response = httpx.post(f"{base}/mcp", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def counts(base: str) -> dict:
    return httpx.get(f"{base}/sessions").json()


def wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def ws_call(ws, kind: str, data: dict | None = None) -> dict:
    ws.send(json.dumps({"type": kind, "data": data or {}}))
    return json.loads(ws.recv(timeout=30))


def test_mcp_sessions_count_and_release_their_workers(task):
    app = create_app(ServerConfig(max_sessions=3, idle_timeout_s=None), tasks=[task])
    before = alive(descendants(os.getpid()))
    with running_server(app) as base:
        ids = [mcp(base, "openenv/session/create")["result"]["session_id"] for _ in range(3)]
        assert counts(base) == {"active": 3, "http": 0, "websocket": 0, "mcp": 3, "max_sessions": 3}
        refused = httpx.post(f"{base}/reset", json={"task_id": task.id})
        assert refused.status_code == 429 and "3 of 3 sessions are open" in refused.json()["detail"]
        extra = mcp(base, "openenv/session/create")
        assert "session limit reached: 3 of 3" in extra["error"]["message"]
        ws_url = base.replace("http", "ws")
        with connect(f"{ws_url}/ws?session_id={ids[0]}") as ws:
            reply = ws_call(ws, "reset", {"task_id": task.id})
            assert reply["data"]["observation"]["task_id"] == task.id
            step = ws_call(ws, "step", {"text": "```repl\nprint(len(ctx))\n```"})
            assert step["data"]["observation"]["cells"][0]["stdout"].strip() == str(len(task.document))
            workers = alive(descendants(os.getpid())) - before
            assert workers  # the attached session's sandbox worker
        # the WebSocket went: its session is gone, with its worker
        assert wait_for(lambda: counts(base)["mcp"] == 2), counts(base)
        assert wait_for(lambda: not alive(workers)), alive(workers)
        gone = mcp(base, "openenv/session/close", session_id=ids[0])
        assert "Unknown session_id" in gone["error"]["message"]
        # the freed slot takes a new /ws client; an explicit close frees another
        with FathomEnvClient(base).sync() as client:
            assert client.reset(task_id=task.id).observation.task_id == task.id
            assert counts(base) == {"active": 3, "http": 0, "websocket": 1, "mcp": 2, "max_sessions": 3}
        assert mcp(base, "openenv/session/close", session_id=ids[1])["result"]["closed"] is True
        assert wait_for(lambda: counts(base)["active"] == 1), counts(base)


def test_idle_mcp_sessions_are_reaped(task):
    app = create_app(ServerConfig(max_sessions=2, idle_timeout_s=0.5), tasks=[task])
    with running_server(app) as base:
        session_id = mcp(base, "openenv/session/create")["result"]["session_id"]
        assert counts(base)["mcp"] == 1
        assert wait_for(lambda: counts(base)["active"] == 0), counts(base)
        with connect(f"{base.replace('http', 'ws')}/ws?session_id={session_id}") as ws:
            error = json.loads(ws.recv(timeout=10))
        assert error["data"]["code"] == "SESSION_ERROR" and "Unknown session_id" in error["data"]["message"]


def test_finished_sessions_are_reclaimed_at_the_cap(task):
    app = create_app(ServerConfig(max_sessions=2, idle_timeout_s=None), tasks=[task])
    final = f"```repl\nFINAL({task.answer!r})\n```"
    with running_server(app) as base:
        finished = []
        for _ in range(4):  # twice the cap, none closed
            client = FathomClient(base)
            client.reset(task_id=task.id)
            assert client.step(final).done
            finished.append(client.session_id)
        assert counts(base)["active"] == 2
        # the oldest finished sessions made room; the newest are still there
        states = [httpx.get(f"{base}/state", params={"session_id": s}).status_code for s in finished]
        assert states == [404, 404, 200, 200]
        # a /ws client gets in past finished HTTP sessions too
        with FathomEnvClient(base).sync() as ws:
            assert ws.reset(task_id=task.id).observation.task_id == task.id
            # unfinished sessions are never reclaimed: with one running, the cap holds
            running = FathomClient(base)
            running.reset(task_id=task.id)
            refused = httpx.post(f"{base}/reset", json={"task_id": task.id})
            assert refused.status_code == 429, refused.text
            assert running.step("```repl\nprint(7)\n```").cells[0].stdout.strip() == "7"
            running.close()
