"""`fathom serve` and the limits of issue 17 that live in the environment: the turn cap and the step's
wall-clock limit come from flags, and DELETE of a session interrupts its running step."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from server_support import running_server

from fathom.cli import build_parser
from fathom.env import EnvConfig
from fathom.sandbox import SandboxConfig
from fathom.server import ServerConfig, create_app
from fathom.server.cli import server_config
from fathom.tasks import generate_task

SLEEP = "```repl\nimport time\ntime.sleep(1000)\n```"


def test_flags_set_the_turn_cap_and_step_limit() -> None:
    args = build_parser(["serve"]).parse_args(["serve", "--max-turns", "3", "--step-timeout", "7.5"])
    env = server_config(args, None).env
    assert (env.max_iterations, env.step_timeout_s) == (3, 7.5)
    default = server_config(build_parser(["serve"]).parse_args(["serve"]), None).env
    assert (default.max_iterations, default.step_timeout_s) == (12, 60.0)
    with pytest.raises(SystemExit):
        build_parser(["serve"]).parse_args(["serve", "--max-turns", "0"])


@pytest.mark.slow
@pytest.mark.hostile
def test_delete_interrupts_a_running_step() -> None:
    """Five sleeping blocks, DELETE sent 3 s in: the step answers within 1 s with end_reason 'closed'."""
    sandbox = SandboxConfig(soft_timeout_s=10, hard_timeout_s=12)
    app = create_app(ServerConfig(env=EnvConfig(sandbox=sandbox)))
    task = generate_task("niah", 1, 1024).to_dict()
    with running_server(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        session = client.post("/reset", json={"task": task}).json()["session_id"]
        answer: dict = {}

        def step() -> None:
            body = {"session_id": session, "action": {"text": "\n".join([SLEEP] * 5)}}
            answer["response"] = client.post("/step", json=body)
            answer["at"] = time.perf_counter()

        stepping = threading.Thread(target=step)
        stepping.start()
        time.sleep(3)
        sent = time.perf_counter()
        assert client.delete(f"/session/{session}").status_code == 200
        stepping.join(timeout=10)
        assert answer["at"] - sent < 1.0
        response = answer["response"]
        assert response.status_code == 200, response.text
        observation = response.json()["observation"]
        assert observation["done"] and observation["end_reason"] == "closed"
        assert client.get("/sessions").json()["http"] == 0
