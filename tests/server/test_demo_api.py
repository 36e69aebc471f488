"""The web demo's HTTP side against a real server: live episodes streamed as server-sent events (expert on
every family, pasted documents, the model policy on tiny-smol), bad requests, a page that goes away
mid-episode, the trace endpoints, the page itself, and the CLI flags."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_support import REPO, running_server, wait_healthy

from fathom.cli import build_parser
from fathom.policies.expert import EXPERTS
from fathom.server import ServerConfig, create_app
from fathom.server.demo import CSP, DemoConfig
from fathom.server.demo_cli import demo_config
from fathom.server.demo_runs import load_demo_model
from fathom.tasks import generate_task

FIXTURES = Path(__file__).parent / "fixtures" / "trace-runs"
Event = tuple[str, dict[str, Any]]


@pytest.fixture(scope="module")
def model():
    return load_demo_model("tiny-smol")


@pytest.fixture(scope="module")
def url(model):
    demo = DemoConfig(runs_dir=FIXTURES, model=model)
    app = create_app(ServerConfig(max_sessions=4, idle_timeout_s=None, max_length_tokens=65536), demo=demo)
    with running_server(app) as base_url:
        yield base_url


def parse_sse(lines: Any) -> Any:
    event, data = "message", []
    for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield event, json.loads("\n".join(data))
            event, data = "message", []


def run(url: str, body: dict[str, Any]) -> list[Event]:
    with httpx.stream("POST", f"{url}/demo/api/run", json=body, timeout=120) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(parse_sse(response.iter_lines()))


def active(url: str) -> int:
    return httpx.get(f"{url}/sessions").json()["active"]


def test_expert_niah_streams_every_piece(url):
    events = run(url, {"policy": "expert", "generated": {"family": "niah", "length_tokens": 8192, "seed": 3}})
    assert [e for e, _ in events] == ["task", "start", "turn", "turn", "end"]
    task, start, end = events[0][1], events[1][1], events[-1][1]
    assert task["family"] == "niah" and task["doc_chars"] > 20_000 and len(task["document_head"]) == 4000
    assert start["first"].startswith("Question: " + task["question"])
    first, last = events[2][1], events[3][1]
    assert "re.findall" in first["text"] and first["cells"][0]["code"] in first["text"]
    assert "chars;" in first["cells"][0]["stdout"] and last["answer"] == task["gold"]
    assert end["answer"] == task["gold"] and end["breakdown"]["correct"] is True and end["turns"] == 2
    assert set(end["breakdown"]["components"]) == {"format", "correctness", "token_budget", "recursion"}
    assert active(url) == 0  # the episode's slot is back


@pytest.mark.parametrize("family", sorted(EXPERTS))  # the families the expert has a program for
def test_expert_solves_every_family(url, family):
    events = run(url, {"generated": {"family": family, "length_tokens": 4096, "seed": 1}})
    end = events[-1][1]
    assert end["breakdown"]["correct"] is True, (family, end)


def test_pasted_document_in_a_family_format_gets_its_gold_and_script(url):
    task = generate_task("niah", 11, 2048)
    body = {"pasted": {"document": task.document, "question": task.question}}
    events = run(url, body)
    assert events[0][1]["family"] == "niah" and events[0][1]["gold"] == task.answer
    assert events[-1][1]["breakdown"]["correct"] is True


def test_pasted_free_form_question(url):
    document = "Intro.\nThe vault code is amber-7.\nOutro about nothing."
    no_gold = httpx.post(
        f"{url}/demo/api/run", json={"pasted": {"document": document, "question": "Vault code?"}}
    )
    assert no_gold.status_code == 422 and "give a gold answer" in no_gold.json()["detail"]
    body = {"pasted": {"document": document, "question": "What is the vault code?", "gold": "amber-7"}}
    events = run(url, body)
    turns = [d for e, d in events if e == "turn"]
    assert len(turns) == 2 and turns[1]["subcalls"][0]["reply"] == "The vault code is amber-7."
    assert events[0][1]["family"] == "pasted" and events[-1][1]["answer"] == "The vault code is amber-7."


def test_model_policy_on_tiny_smol(url):
    body = {
        "policy": "model",
        "max_turns": 2,
        "max_new_tokens": 8,
        "generated": {"family": "niah", "length_tokens": 2048},
    }
    events = run(url, body)
    assert [e for e, _ in events] == ["task", "start", "turn", "turn", "end"]
    assert all(d["tokens"] <= 8 for e, d in events if e == "turn")
    assert events[-1][1]["end_reason"] in {"max_iterations", "max_turns", "answered"}


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        ({"generated": {"family": "nope"}}, 422, "unknown family"),
        ({"generated": {"family": "niah", "length_tokens": 1 << 20}}, 422, "over the limit"),
        ({"generated": {"family": "niah"}, "pasted": {"document": "x", "question": "y"}}, 422, "exactly one"),
        ({"generated": {"family": "niah"}, "shell": "rm -rf /"}, 422, "unknown field"),
        ({"policy": "human", "generated": {"family": "niah"}}, 422, "policy"),
        (
            {"pasted": {"document": "x", "question": "y", "gold": "[1, {}]", "metric": "set_f1"}},
            422,
            "set_f1",
        ),
    ],
)
def test_bad_requests(url, body, status, detail):
    response = httpx.post(f"{url}/demo/api/run", json=body)
    assert response.status_code == status and detail in response.json()["detail"]


def test_model_policy_needs_a_model():
    with running_server(create_app()) as base_url:
        response = httpx.post(
            f"{base_url}/demo/api/run", json={"policy": "model", "generated": {"family": "niah"}}
        )
        assert response.status_code == 422 and "--demo-model" in response.json()["detail"]
        assert httpx.get(f"{base_url}/demo/api/options").json()["policies"] == [
            {"id": "expert", "label": "expert (scripted)"}
        ]
        assert httpx.get(f"{base_url}/demo/api/runs").status_code == 404


def test_a_page_that_goes_away_stops_its_episode(url, model):
    body = {"policy": "model", "max_turns": 24, "max_new_tokens": 64, "generated": {"family": "niah"}}
    with httpx.stream("POST", f"{url}/demo/api/run", json=body, timeout=60) as response:
        for event, _ in parse_sse(response.iter_lines()):
            if event == "turn":
                break
    deadline = time.monotonic() + 20
    while active(url) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert active(url) == 0
    calls = model.backend.calls
    time.sleep(1.0)
    assert model.backend.calls == calls  # no more turns are generated for nobody


def test_trace_endpoints(url):
    runs = httpx.get(f"{url}/demo/api/runs").json()
    assert [f["file"] for f in runs["files"]] == ["eval-run/traces.jsonl", "train-run/traces.jsonl"]
    page = httpx.get(f"{url}/demo/api/traces", params={"file": "train-run/traces.jsonl"}).json()
    assert [r["line"] for r in page["rows"]] == [0, 1, 2, 3]
    view = httpx.get(f"{url}/demo/api/trace", params={"file": "train-run/traces.jsonl", "line": 0}).json()
    assert view["end"]["breakdown"]["correct"] is True and len(view["turns"]) == 2
    for params, status in [
        ({"file": "../../test_demo_api.py", "line": 0}, 404),
        ({"file": "train-run/traces.jsonl", "line": 99}, 404),
        ({"file": "train-run/traces.jsonl", "line": 3}, 422),
    ]:
        assert httpx.get(f"{url}/demo/api/trace", params=params).status_code == status


def test_page_and_static_files(url):
    root = httpx.get(f"{url}/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/demo"
    page = httpx.get(f"{url}/demo")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CSP
    assert "/demo/static/demo.js" in page.text and "http" not in page.text.replace("http-equiv", "")
    for name in ("demo.js", "demo.css"):
        assert httpx.get(f"{url}/demo/static/{name}").status_code == 200
    assert "innerHTML" not in httpx.get(f"{url}/demo/static/demo.js").text


def test_fathom_demo_prints_a_url_that_serves_the_page(tmp_path):
    cmd = [sys.executable, "-m", "fathom", "demo", "--port", "0", "--pool", "0", "--runs", str(FIXTURES)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        page = re.search(r"(http://127\.0\.0\.1:\d+)/demo", line)
        assert page, line
        wait_healthy(page.group(1), proc)
        assert "FATHOM" in httpx.get(page.group(0)).text
        assert httpx.get(f"{page.group(1)}/demo/api/options").json()["runs"] is True
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_flags(tmp_path):
    args = build_parser(["serve"]).parse_args(["serve", "--runs", str(tmp_path), "--demo-model", "tiny-smol"])
    assert (args.runs, args.demo_model) == (tmp_path, "tiny-smol")
    args = build_parser(["demo"]).parse_args(["demo", "--port", "0", "--runs", str(tmp_path / "nope")])
    assert (args.command, args.host, args.port) == ("demo", "127.0.0.1", 0)
    with pytest.raises(FileNotFoundError, match="--runs"):
        demo_config(args)
