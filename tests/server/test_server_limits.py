"""Limits of `fathom serve` against hostile HTTP clients, on a real server on loopback: the trace browser
answers 4xx (never 500) to names and numbers no file system or `islice` accepts and lists nothing outside
its root; a client that sends half a request is disconnected; the demo's family solvers only read
documents up to their bound; in-process sub-LM functions run off the event loop."""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
from pathlib import Path

import httpx
import pytest
from server_support import running_server

from fathom.env import ScriptedSubLM, SubLMRequest
from fathom.server import ServerConfig, create_app
from fathom.server.demo import DemoConfig
from fathom.server.demo_runs import SOLVER_MAX_CHARS
from fathom.tasks import generate_task

FIXTURES = Path(__file__).parent / "fixtures" / "trace-runs"
CLIENT_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("runs")
    root = tmp / "runs"
    shutil.copytree(FIXTURES, root)
    outside = tmp / "secret"
    outside.mkdir()
    (outside / "traces.jsonl").write_text('{"turns": []}\n' * 7)
    (root / "traces.escape.jsonl").symlink_to(outside / "traces.jsonl")  # a file out of the root
    (root / "escape-dir").symlink_to(outside)  # a folder out of the root
    return root


@pytest.fixture(scope="module")
def base(runs):
    config = ServerConfig(max_sessions=2, idle_timeout_s=None, client_timeout_s=CLIENT_TIMEOUT_S)
    with running_server(create_app(config, demo=DemoConfig(runs_dir=runs))) as url:
        yield url


def test_runs_lists_nothing_outside_its_root(base):
    files = [f["file"] for f in httpx.get(f"{base}/demo/api/runs").json()["files"]]
    assert files == ["eval-run/traces.jsonl", "train-run/traces.jsonl"]


@pytest.mark.parametrize(
    ("path", "params", "status", "fragment"),
    [
        ("trace", {"file": "train-run/tra\x00ces.jsonl", "line": 0}, 404, "no trace file"),
        ("traces", {"file": "a\x00b"}, 404, "no trace file"),
        ("trace", {"file": "x" * 5000, "line": 0}, 404, "no trace file"),
        ("traces", {"file": "a/" * 3000 + "traces.jsonl"}, 404, "no trace file"),
        ("trace", {"file": "train-run/traces.jsonl", "line": 2**63}, 422, "line: Input should be less"),
        ("traces", {"file": "train-run/traces.jsonl", "offset": 2**63}, 422, "offset: Input should be less"),
        ("trace", {"file": "traces.escape.jsonl", "line": 0}, 404, "no trace file"),
    ],
)
def test_trace_browser_answers_4xx(base, path, params, status, fragment):
    response = httpx.get(f"{base}/demo/api/{path}", params=params)
    assert response.status_code == status, response.text
    assert fragment in response.json()["detail"]


def _closed_within(sock: socket.socket, timeout_s: float) -> bytes:
    """What the server sent before closing the connection; fails if it is still open after timeout_s."""
    sock.settimeout(timeout_s)
    received = b""
    while chunk := sock.recv(65536):  # socket.timeout here: the server never closed it
        received += chunk
    return received


@pytest.mark.parametrize(
    "half",
    [
        b"",  # connects and says nothing
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # a request head without its end
        b'POST /reset HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"ta',
    ],
    ids=["nothing", "half a head", "half a body"],
)
def test_half_sent_requests_are_cut_off(base, half):
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(half)
        received = _closed_within(sock, 20 * CLIENT_TIMEOUT_S + 5)
    if half.startswith(b"POST"):  # the head arrived: the client is told why
        assert received.startswith(b"HTTP/1.1 408"), received
        assert b"request body not received" in received
    else:
        assert received == b""
    assert httpx.get(f"{base}/sessions").json()["active"] == 0
    assert httpx.get(f"{base}/healthz").status_code == 200


def test_demo_solvers_read_documents_up_to_their_bound(base):
    task = generate_task("pairs", 2, 16384)
    assert len(task.document) > SOLVER_MAX_CHARS
    body = {"pasted": {"document": task.document, "question": task.question}}
    refused = httpx.post(f"{base}/demo/api/run", json=body, timeout=60)
    assert refused.status_code == 422
    assert f"the task families' solvers read documents up to {SOLVER_MAX_CHARS:,}" in refused.json()["detail"]
    bad_gold = {"pasted": {**body["pasted"], "gold": "[1, 2", "metric": "set_f1"}}
    refused = httpx.post(f"{base}/demo/api/run", json=bad_gold, timeout=60)
    assert refused.status_code == 422 and "gold answer" in refused.json()["detail"]


def test_scripted_sub_lm_runs_off_the_event_loop():
    threads = []

    def reader(prompt: str, chunk: str) -> str:
        threads.append(threading.get_ident())
        return f"{prompt}|{len(chunk)}"

    async def main():
        sub_lm = ScriptedSubLM(reader)
        replies = await sub_lm.complete([SubLMRequest("a", "xy"), SubLMRequest("b", "xyz")])
        return threading.get_ident(), [r.text for r in replies]

    loop_thread, texts = asyncio.run(main())
    assert texts == ["a|2", "b|3"]
    assert len(threads) == 2 and loop_thread not in threads
