"""`fathom serve` against a real uvicorn server on loopback: the same episode in-process, over HTTP and
over OpenEnv's /ws gives the same trajectory; OpenEnv's own client and runtime validator accept the
server; the session cap, per-session serialisation, the idle timeout and the bearer token hold."""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest
import websockets
from openenv.cli._validation import validate_running_environment
from server_support import alive, descendants, niah_turns, normalise, running_server
from websockets.sync.client import connect

from fathom.env import EnvConfig, RLMAction, RLMEnvironment, ScriptedSubLM
from fathom.policies.expert import EXPERTS, expert_turn
from fathom.policies.readers import expert_reader, keyword_reader
from fathom.server import (
    AsyncFathomClient,
    FathomClient,
    FathomEnvClient,
    ServerConfig,
    ServerError,
    create_app,
)
from fathom.tasks import generate_task

LENGTH = 2048


@pytest.fixture(scope="module")
def task():
    return generate_task("niah", 7, LENGTH)


@pytest.fixture(scope="module")
def url(task):
    app = create_app(
        ServerConfig(max_sessions=16, idle_timeout_s=None), ScriptedSubLM(keyword_reader), [task]
    )
    with running_server(app) as base_url:
        yield base_url


async def _in_process(task, turns):
    env = RLMEnvironment(EnvConfig(), sub_lm=ScriptedSubLM(keyword_reader))
    try:
        observations = [await env.reset_async(task=task)]
        for turn in turns:
            observations.append(await env.step_async(RLMAction(text=turn)))
        return observations
    finally:
        await env.aclose()


def _over_http(url, turns, **reset):
    with FathomClient(url) as client:
        observations = [client.reset(**reset)]
        observations += [client.step(turn) for turn in turns]
        state = client.state
    return observations, state


def _over_websocket(url, turns, **reset):
    with FathomEnvClient(url).sync() as client:
        results = [client.reset(**reset)]
        results += [client.step(RLMAction(text=turn)) for turn in turns]
        state = client.state()
    assert [r.done for r in results] == [r.observation.done for r in results]
    assert [r.reward for r in results] == [r.observation.reward for r in results]
    return [r.observation for r in results], state


def test_same_trajectory_in_process_over_http_and_websocket(url, task):
    turns = niah_turns(task)
    local = [normalise(o) for o in asyncio.run(_in_process(task, turns))]
    http_inline, http_state = _over_http(url, turns, task=task)
    http_by_id, _ = _over_http(url, turns, task_id=task.id)
    ws, ws_state = _over_websocket(url, turns, task=task.to_dict())
    assert [normalise(o) for o in http_inline] == local
    assert [normalise(o) for o in http_by_id] == local
    assert [normalise(o) for o in ws] == local

    # and the trajectory is the one the script means
    first, output, error, no_code, grep, final = local
    assert first["question"] == task.question and first["doc_chars"] == len(task.document)
    assert output["cells"][0]["stdout"].startswith(str(len(task.document)))
    assert "ZeroDivisionError" in error["cells"][0]["error"]
    assert no_code["cells"] == [] and "No ```repl``` code block" in no_code["text"]
    assert task.answer in grep["cells"][0]["stdout"] and len(grep["subcalls"]) == 1
    assert task.answer in grep["subcalls"][0]["reply"]
    assert (final["done"], final["answer"], final["end_reason"]) == (True, task.answer, "answered")
    assert final["reward"] == final["reward_breakdown"]["total"] and final["reward_breakdown"]["correct"]
    assert [o["done"] for o in local[:-1]] == [False] * 5
    for state in (http_state, ws_state):
        assert (state.iteration, state.done, state.answer, state.task_id) == (5, True, task.answer, task.id)


@pytest.fixture(scope="module")
def expert_url():
    app = create_app(ServerConfig(max_sessions=4, idle_timeout_s=None), expert_reader())
    with running_server(app) as base_url:
        yield base_url


@pytest.mark.parametrize("family", sorted(EXPERTS))  # the families the expert has a program for
def test_expert_episode_is_the_same_everywhere(expert_url, family):
    task = generate_task(family, 1, LENGTH)
    env = RLMEnvironment(EnvConfig(), sub_lm=expert_reader())

    async def in_process():
        observations = [await env.reset_async(task=task)]
        while not observations[-1].done:
            observations.append(
                await env.step_async(RLMAction(text=expert_turn(task, len(observations) - 1)))
            )
        await env.aclose()
        return observations

    local = asyncio.run(in_process())
    turns = [expert_turn(task, i) for i in range(len(local) - 1)]
    http, _ = _over_http(expert_url, turns, task=task)
    ws, _ = _over_websocket(expert_url, turns, task=task.to_dict())
    assert [normalise(o) for o in http] == [normalise(o) for o in local] == [normalise(o) for o in ws]
    assert local[-1].reward_breakdown["correct"] and local[-1].answer == task.answer


def test_openenv_surface_and_runtime_validator(url):
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{url}/health").json()["status"] == "healthy"
    schema = httpx.get(f"{url}/schema").json()
    assert (
        "text" in schema["action"]["properties"] and "reward_breakdown" in schema["observation"]["properties"]
    )
    assert "iteration" in schema["state"]["properties"]
    assert httpx.get(f"{url}/metadata").json()["name"]
    report = validate_running_environment(url)
    assert report["passed"], [c for c in report["criteria"] if not c["passed"]]


def test_generated_task_and_a_wrong_answer(url, task):
    with FathomClient(url) as client:
        first = client.reset(family="niah", seed=7, length_tokens=LENGTH)
        assert first.task_id == task.id and first.question == task.question  # generators are deterministic
        last = client.step("```repl\nFINAL('0000000')\n```")
    assert (last.done, last.answer, last.end_reason) == (True, "0000000", "answered")
    breakdown = last.reward_breakdown
    assert (breakdown["correct"], breakdown["score"]) == (False, 0.0) and last.reward == breakdown[
        "total"
    ] < 0.5


def test_steps_of_one_session_are_serialised(url, task):
    # Each turn has two cells; if two steps interleaved, a turn would print another turn's value.
    def turn(i: int) -> str:
        return f"```repl\nimport time\nv = {i}\ntime.sleep(0.02)\n```\n```repl\nprint(v)\n```"

    async def main():
        async with AsyncFathomClient(url) as client:
            await client.reset(task_id=task.id)
            observations = await asyncio.gather(*(client.step(turn(i)) for i in range(6)))
            return observations, await client.state()

    observations, state = asyncio.run(main())
    assert [o.cells[1].stdout for o in observations] == [f"{i}\n" for i in range(6)]
    assert sorted(o.iteration for o in observations) == [1, 2, 3, 4, 5, 6] and state.iteration == 6


def test_concurrent_episodes_each_get_their_own_answer(url):
    tasks = [generate_task("niah", seed, LENGTH) for seed in range(8)]

    async def episode(task):
        async with AsyncFathomClient(url) as client:
            await client.reset(task=task)
            observation = None
            for turn in niah_turns(task):
                observation = await client.step(turn)
            return observation

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(episode(t) for t in tasks)), 120)

    finals = asyncio.run(main())
    assert [f.answer for f in finals] == [t.answer for t in tasks]
    assert all(f.done and f.reward == f.reward_breakdown["total"] for f in finals)


def test_session_cap_counts_http_and_websocket_together(task):
    app = create_app(ServerConfig(max_sessions=2, idle_timeout_s=None), tasks=[task])
    with running_server(app) as base:
        first, ws = FathomClient(base), FathomEnvClient(base).sync()
        first.reset(task_id=task.id)
        ws.connect()
        ws.reset(task_id=task.id)
        assert httpx.get(f"{base}/sessions").json() == {
            "active": 2,
            "http": 1,
            "websocket": 1,
            "mcp": 0,
            "max_sessions": 2,
        }
        refused = httpx.post(f"{base}/reset", json={"task_id": task.id})
        assert refused.status_code == 429 and "session limit reached: 2 of 2" in refused.json()["detail"]
        with FathomEnvClient(base).sync() as extra, pytest.raises(RuntimeError, match="CAPACITY_REACHED"):
            extra.reset(task_id=task.id)
        # the two live sessions are untouched, and a freed slot is usable again
        assert first.step("```repl\nprint(len(ctx))\n```").cells[0].stdout.strip() == str(len(task.document))
        assert (
            ws.step(RLMAction(text="```repl\nprint(2 + 2)\n```")).observation.cells[0].stdout.strip() == "4"
        )
        first.close()
        with FathomClient(base) as again:
            assert again.reset(task_id=task.id).task_id == task.id
        ws.close()
        # the server notices the closed socket asynchronously: give it a bounded moment
        deadline = time.monotonic() + 10
        while httpx.get(f"{base}/sessions").json()["active"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{base}/sessions").json()["active"] == 0


def test_idle_sessions_are_reaped_over_http_and_websocket(task):
    app = create_app(ServerConfig(max_sessions=4, idle_timeout_s=1.0), tasks=[task])
    before = alive(descendants(os.getpid()))
    with running_server(app) as base, connect(base.replace("http", "ws") + "/ws") as ws:
        busy, idle = FathomClient(base), FathomClient(base)
        busy.reset(task_id=task.id)
        idle.reset(task_id=task.id)
        ws.send(json.dumps({"type": "reset", "data": {"task_id": task.id}}))
        assert json.loads(ws.recv())["data"]["observation"]["task_id"] == task.id
        workers = alive(descendants(os.getpid())) - before  # 3 sessions' sandbox processes
        # a step longer than the timeout is not idleness
        long_step = busy.step("```repl\nimport time\ntime.sleep(1.3)\nprint('done')\n```")
        assert long_step.cells[0].stdout.strip() == "done"
        assert busy.step("```repl\nprint(1)\n```").iteration == 2
        deadline = time.monotonic() + 10
        while httpx.get(f"{base}/sessions").json()["active"] > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{base}/sessions").json() == {
            "active": 1,
            "http": 1,
            "websocket": 0,
            "mcp": 0,
            "max_sessions": 4,
        }
        gone = httpx.get(f"{base}/state", params={"session_id": idle.session_id})
        assert gone.status_code == 404 and "unknown session" in gone.json()["detail"]
        with pytest.raises(websockets.ConnectionClosed):
            ws.recv(timeout=5)
        assert (ws.close_code, ws.close_reason) == (1001, "idle timeout")
        # the reaped sessions' workers are gone; the busy one's are not
        assert len(workers) == 9 and len(alive(workers)) == 3
        busy.close()
        assert alive(workers) == set()
        idle.close()  # already reaped: closing is still fine


def test_bearer_token_guards_http_and_websocket(task):
    token = "s3cret-token"
    app = create_app(ServerConfig(token=token, idle_timeout_s=None), tasks=[task])
    with running_server(app) as base:
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}  # probes stay open
        for method, path in [("POST", "/reset"), ("POST", "/step"), ("GET", "/schema"), ("GET", "/sessions")]:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": token}):
                r = httpx.request(method, f"{base}{path}", headers=headers, json={})
                assert r.status_code == 401 and "bearer token" in r.json()["detail"]
                assert r.headers["www-authenticate"] == "Bearer"

        async def ws_status(headers):
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with websockets.connect(base.replace("http", "ws") + "/ws", additional_headers=headers):
                    pass
            return refused.value.response.status_code

        assert asyncio.run(ws_status({})) == 401
        assert asyncio.run(ws_status({"Authorization": "Bearer wrong"})) == 401
        with pytest.raises(ServerError, match="HTTP 401"):
            FathomClient(base).reset(task_id=task.id)
        with FathomClient(base, token=token) as client:
            assert client.reset(task_id=task.id).task_id == task.id
        with FathomEnvClient(base, token=token).sync() as ws:
            assert ws.reset(task_id=task.id).observation.task_id == task.id
