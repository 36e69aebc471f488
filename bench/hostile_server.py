"""Hostile clients against a real `fathom serve` on loopback (issue 17, items 4-7): each attack is bounded in
requests and seconds, and each timed one is compared with a baseline measured in the same run.

Attacks, each a PASS/FAIL line:

- ``mcp-sessions``: fill the cap with /mcp sessions, drive each over ``/ws?session_id=`` and drop the
  socket: every slot and every sandbox worker must come back, and a new /ws client must get in;
- ``reclaim``: run 3× the cap of HTTP episodes to their end without closing one: no 429;
- ``healthz-under-llm``: two sessions make 96 `llm()` calls of 396K characters each, in batches (scripted sub-LM):
  /healthz latency, worst probe against the idle server's worst;
- ``reset-under-pastes``: six demo pastes of a 137 KB pairs document in flight (no gold: the solvers'
  bound refuses them; with a gold: a free-form episode): an unrelated ``POST /reset``, against the same
  reset on the idle server;
- ``trace-browser``, ``ws-frames``, ``half-requests``: hostile names, numbers, frames and half-sent
  requests all get a 4xx or an error frame (never 500, never a dead session), half requests are cut off;
- ``token-counts``: an 80,000-character answer reporting ``num_tokens: 0`` earns what the truth earns.

    .venv/bin/python bench/hostile_server.py          # exit status 1 if any attack succeeds
    .venv/bin/python bench/hostile_server.py --only healthz-under-llm,reset-under-pastes
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
from websockets.sync.client import connect

from fathom.tasks import FAMILIES, estimate_tokens, generate_task, records

MAX_SESSIONS = 6
CLIENT_TIMEOUT_S = 1.0
# Issue 17 measured 2-5 s for /healthz and 8-10 s for an unrelated /reset under these attacks.
HEALTHZ_CEILING_S = 1.0
RESET_CEILING_S = 3.0  # a reset spawns a jailed worker while the pastes' episodes share the cores
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str) -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def server(runs: Path) -> Iterator[tuple[str, psutil.Process]]:
    port = free_port()
    cmd = [sys.executable, "-m", "fathom", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--max-sessions", str(MAX_SESSIONS), "--idle-timeout", "30", "--sub-lm", "scripted"]
    cmd += ["--pool", "0", "--runs", str(runs), "--client-timeout", str(CLIENT_TIMEOUT_S)]
    cmd += ["--log-level", "warning"]
    proc = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.1)
        yield url, psutil.Process(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def active(url: str) -> int:
    return httpx.get(f"{url}/sessions").json()["active"]


def workers(proc: psutil.Process) -> set[int]:
    return {p.pid for p in proc.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


def ws_call(ws, kind: str, data: dict) -> dict:
    ws.send(json.dumps({"type": kind, "data": data}))
    return json.loads(ws.recv(timeout=60))


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ---- item 4 ------------------------------------------------------------------------------------------
def mcp_sessions(url: str, proc: psutil.Process, task_dict: dict) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
    ids = [httpx.post(f"{url}/mcp", json=body).json()["result"]["session_id"] for _ in range(MAX_SESSIONS)]
    counted = active(url)
    for session_id in ids:
        with connect(f"{url.replace('http', 'ws')}/ws?session_id={session_id}", max_size=None) as ws:
            ws_call(ws, "reset", {"task": task_dict})
            ws_call(ws, "step", {"text": "```repl\nprint(len(ctx))\n```"})
    released = wait_for(lambda: active(url) == 0 and not workers(proc))
    with connect(f"{url.replace('http', 'ws')}/ws", max_size=None) as ws:
        newcomer = ws_call(ws, "reset", {"task": task_dict})["type"]
    ok = counted == MAX_SESSIONS and released and newcomer == "observation"
    check("mcp-sessions", ok, f"counted {counted}/{MAX_SESSIONS}, released {released}, new /ws: {newcomer}")


def reclaim(url: str, task) -> None:
    final = f"```repl\nFINAL({task.answer!r})\n```"
    statuses = []
    for _ in range(3 * MAX_SESSIONS):
        reset = httpx.post(f"{url}/reset", json={"task": task.to_dict()}, timeout=60)
        statuses.append(reset.status_code)
        if reset.status_code == 200:
            step = {"session_id": reset.json()["session_id"], "action": {"text": final}}
            httpx.post(f"{url}/step", json=step, timeout=60)
    ok = set(statuses) == {200}
    check("reclaim", ok, f"{len(statuses)} unclosed episodes under a cap of {MAX_SESSIONS}: {set(statuses)}")


# ---- item 5 ------------------------------------------------------------------------------------------
def probe_latencies(url: str, stop: threading.Event, out: list[float]) -> None:
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            out.append(timed(lambda: client.get(f"{url}/healthz")))
            time.sleep(0.02)


LLM_FLOOD = (  # 96 calls of 396K characters per session, in batches of 32 (12.7 MB frames)
    "```repl\nchunk = 'the magic number is 1234567 and some words here\\n' * 8250\n"
    "for _ in range(3):\n    llm_batch([('magic number', chunk)] * 32)\nprint('ok')\n```"
)


def healthz_under_llm(url: str, task_dict: dict) -> None:
    idle: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe_latencies, args=(url, stop, idle))
    prober.start()
    time.sleep(1.0)
    stop.set()
    prober.join()

    def flood() -> str:
        with httpx.Client(timeout=300) as client:
            session = client.post(f"{url}/reset", json={"task": task_dict}).json()["session_id"]
            step = {"session_id": session, "action": {"text": LLM_FLOOD}}
            reply = client.post(f"{url}/step", json=step).json()
            client.delete(f"{url}/session/{session}")
            return reply["observation"]["cells"][0]["stdout"].strip()

    busy: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe_latencies, args=(url, stop, busy))
    with ThreadPoolExecutor(2) as pool:
        floods = [pool.submit(flood) for _ in range(2)]
        prober.start()
        outputs = [f.result() for f in floods]
    stop.set()
    prober.join()
    worst, base = max(busy), max(idle)
    ok = outputs == ["ok", "ok"] and worst < HEALTHZ_CEILING_S
    check(
        "healthz-under-llm",
        ok,
        f"worst /healthz {worst * 1000:.0f} ms over {len(busy)} probes, idle worst {base * 1000:.1f} ms "
        f"(ratio {worst / base:.1f}x; ceiling {HEALTHZ_CEILING_S:g} s); floods: {outputs}",
    )


def pairs_paste() -> tuple[str, str]:
    """A 137 KB pairs document whose every user qualifies: quadratic for the pairs solver."""
    task = generate_task("pairs", 1, 2048)
    label = re.search(r"category '([^']+)'", task.question).group(1)
    lines = [m for m in records.RECORD_RE.finditer(task.document) if records.label_of(m.group(3)) == label]
    date, instance = lines[0].group(1), lines[0].group(3)
    document = "\n".join(f"Date: {date} || User: {10_000 + i} || Instance: {instance}" for i in range(1220))
    return task.question, document


def reset_under_pastes(url: str, task_dict: dict) -> None:
    def reset_and_close() -> None:
        reply = httpx.post(f"{url}/reset", json={"task": task_dict}, timeout=120).json()
        httpx.delete(f"{url}/session/{reply['session_id']}")

    baseline = min(timed(reset_and_close) for _ in range(3))
    question, document = pairs_paste()
    bodies = [{"pasted": {"document": document, "question": question}} for _ in range(3)]
    bodies += [{"pasted": {"document": document, "question": question, "gold": "[[1, 2]]"}} for _ in range(3)]

    def paste(body: dict) -> int:
        with httpx.stream("POST", f"{url}/demo/api/run", json=body, timeout=120) as response:
            response.read()
            return response.status_code

    with ThreadPoolExecutor(6) as pool:
        pastes = [pool.submit(paste, b) for b in bodies]
        time.sleep(0.2)
        during = timed(reset_and_close)
        statuses = [p.result() for p in pastes]
    ok = during < RESET_CEILING_S and statuses == [422] * 3 + [200] * 3
    check(
        "reset-under-pastes",
        ok,
        f"POST /reset {during * 1000:.0f} ms with 6 pastes of {len(document):,} chars in flight, "
        f"{baseline * 1000:.0f} ms idle (ratio {during / baseline:.1f}x; ceiling {RESET_CEILING_S:g} s); paste statuses {statuses}",
    )


# ---- item 6 ------------------------------------------------------------------------------------------
def trace_browser(url: str) -> None:
    cases = [
        ("trace", {"file": "a\x00b", "line": 0}),
        ("trace", {"file": "x" * 5000, "line": 0}),
        ("traces", {"file": "train-run/traces.jsonl", "offset": 2**63}),
        ("trace", {"file": "train-run/traces.jsonl", "line": 2**63}),
        ("trace", {"file": "traces.escape.jsonl", "line": 0}),
    ]
    statuses = [httpx.get(f"{url}/demo/api/{path}", params=params).status_code for path, params in cases]
    listed = [f["file"] for f in httpx.get(f"{url}/demo/api/runs").json()["files"]]
    ok = all(400 <= s < 500 for s in statuses) and not any("escape" in f for f in listed)
    check("trace-browser", ok, f"statuses {statuses}; listed {listed}")


def ws_frames(url: str, task_dict: dict) -> None:
    frames = ["[1,2]", "null", '"x"', b"\x00binary", json.dumps({"type": "reset", "data": {"task": "str"}})]
    frames.append(json.dumps({"type": "reset", "data": {"family": "niah", "seed": "abc"}}))
    with connect(f"{url.replace('http', 'ws')}/ws", max_size=None) as ws:
        ws_call(ws, "reset", {"task": task_dict})
        replies = []
        for frame in frames:
            ws.send(frame)
            replies.append(json.loads(ws.recv(timeout=30)))
        alive = ws_call(ws, "step", {"text": "```repl\nprint(6 * 7)\n```"})
    errors = [r["type"] == "error" and r["data"]["message"] for r in replies]
    still = alive["data"]["observation"]["cells"][0]["stdout"].strip() == "42"
    ok = all(errors) and still
    check("ws-frames", ok, f"{sum(map(bool, errors))}/{len(frames)} error frames, session alive: {still}")


def half_requests(url: str) -> None:
    port = int(url.rsplit(":", 1)[1])
    halves = [
        b"",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
        b"POST /reset HTTP/1.1\r\nContent-Length: 50\r\n\r\n{",
    ]
    waited = []
    for half in halves:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(half)
            sock.settimeout(10 * CLIENT_TIMEOUT_S)
            started = time.perf_counter()
            try:
                while sock.recv(65536):
                    pass
                waited.append(time.perf_counter() - started)
            except TimeoutError:
                waited.append(float("inf"))
    ok = all(w < 5 * CLIENT_TIMEOUT_S for w in waited)
    shown = ", ".join(f"{w:.1f} s" for w in waited)
    check("half-requests", ok, f"closed after {shown} (client timeout {CLIENT_TIMEOUT_S:g} s)")


# ---- item 7 ------------------------------------------------------------------------------------------
def token_counts(url: str, task) -> None:
    turn = "# " + "x" * 79_990 + f"\n```repl\nFINAL({task.answer!r})\n```"
    rewards = []
    for reported in (0, estimate_tokens(turn)):
        session = httpx.post(f"{url}/reset", json={"task": task.to_dict()}).json()["session_id"]
        step = {"session_id": session, "action": {"text": turn, "num_tokens": reported}}
        rewards.append(httpx.post(f"{url}/step", json=step, timeout=60).json()["reward"])
        httpx.delete(f"{url}/session/{session}")
    check(
        "token-counts",
        rewards[0] == rewards[1],
        f"reward reporting 0 tokens {rewards[0]}, truth {rewards[1]}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated attack names (default: all)")
    only = {name for name in parser.parse_args().only.split(",") if name}
    assert "pairs" in FAMILIES
    task = generate_task("niah", 3, 2048)
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        (runs / "train-run").mkdir(parents=True)
        (runs / "train-run" / "traces.jsonl").write_text('{"turns": []}\n')
        (Path(tmp) / "traces.jsonl").write_text('{"turns": []}\n' * 9)
        (runs / "traces.escape.jsonl").symlink_to(Path(tmp) / "traces.jsonl")
        with server(runs) as (url, proc):
            attacks = [
                ("mcp-sessions", lambda: mcp_sessions(url, proc, task.to_dict())),
                ("reclaim", lambda: reclaim(url, task)),
                ("healthz-under-llm", lambda: healthz_under_llm(url, task.to_dict())),
                ("reset-under-pastes", lambda: reset_under_pastes(url, task.to_dict())),
                ("trace-browser", lambda: trace_browser(url)),
                ("ws-frames", lambda: ws_frames(url, task.to_dict())),
                ("half-requests", lambda: half_requests(url)),
                ("token-counts", lambda: token_counts(url, task)),
            ]
            unknown = only - {name for name, _ in attacks}
            if unknown:
                raise SystemExit(f"unknown attacks: {sorted(unknown)}")
            for name, attack in attacks:
                if only and name not in only:
                    continue
                try:
                    attack()
                except Exception as exc:  # the server broke the client's protocol: that attack got through
                    check(name, False, f"{type(exc).__name__}: {exc}")
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(
        f"{len(RESULTS) - len(failed)}/{len(RESULTS)} attacks contained"
        + (f"; FAILED: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
