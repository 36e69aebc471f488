"""Bad input to a live `fathom serve`: each case gets a 4xx with a clear message, the server keeps
serving, no slot leaks, and a witness session opened before the attack still steps correctly."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import websockets
from server_support import running_server

from fathom.env import EnvConfig, RLMAction
from fathom.server import FathomClient, ServerConfig, create_app
from fathom.tasks import estimate_tokens, generate_task

MAX_BODY = 100_000
MAX_SESSIONS = 3


@pytest.fixture(scope="module")
def task():
    return generate_task("niah", 11, 2048)


@pytest.fixture(scope="module")
def base(task):
    config = ServerConfig(
        max_sessions=MAX_SESSIONS,
        idle_timeout_s=None,
        max_body_bytes=MAX_BODY,
        max_length_tokens=50_000,
        env=EnvConfig(max_iterations=1000, max_episode_tokens=10**7),  # the witness steps many times
    )
    with running_server(create_app(config, tasks=[task])) as url:
        yield url


@pytest.fixture(scope="module")
def witness(base, task):
    client = FathomClient(base)
    client.reset(task_id=task.id)
    yield client
    client.close()


def assert_still_serving(base: str, witness: FathomClient, task) -> None:
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{base}/sessions").json()["active"] == 1  # the witness only: nothing leaked
    before = witness.state.iteration
    observation = witness.step("```repl\nprint(len(ctx))\n```")
    assert observation.cells[0].stdout.strip() == str(len(task.document))
    assert (observation.iteration, observation.done, observation.cells[0].error) == (before + 1, False, None)


def _chunks(total: int, size: int = 20_000):
    for _ in range(total // size):
        yield b"x" * size


# (case, method, path, request kwargs given (task, witness session id), status, message fragment)
CASES = [
    ("malformed JSON", "POST", "/reset", lambda t, s: {"content": b'{"task_id": '}, 400, "malformed JSON"),
    (
        "malformed JSON in step",
        "POST",
        "/step",
        lambda t, s: {"content": b'{"session_id": "%s", "action": {"text": "x"' % s.encode()},
        400,
        "malformed JSON",
    ),
    (
        "not an object",
        "POST",
        "/reset",
        lambda t, s: {"json": [1, 2]},
        422,
        "body: Input should be a valid dict",
    ),
    (
        "not JSON",
        "POST",
        "/reset",
        lambda t, s: {"data": {"task_id": "x"}},
        415,
        "Content-Type: application/json",
    ),
    (
        "unknown field",
        "POST",
        "/reset",
        lambda t, s: {"json": {"task_id": t.id, "colour": "red"}},
        422,
        "unknown field 'colour'",
    ),
    (
        "unknown action field",
        "POST",
        "/step",
        lambda t, s: {"json": {"session_id": s, "action": {"text": "x", "code": "y"}}},
        422,
        "unknown field 'action.code'",
    ),
    (
        "wrong type",
        "POST",
        "/step",
        lambda t, s: {"json": {"session_id": s, "action": {"text": 5}}},
        422,
        "action.text: Input should be a valid string",
    ),
    (
        "two task sources",
        "POST",
        "/reset",
        lambda t, s: {"json": {"task_id": t.id, "family": "niah"}},
        422,
        "body: give exactly one of task, task_id, family",
    ),
    (
        "seed without family",
        "POST",
        "/reset",
        lambda t, s: {"json": {"task_id": t.id, "seed": 3}},
        422,
        "seed and length_tokens only go with family",
    ),
    (
        "unknown task id",
        "POST",
        "/reset",
        lambda t, s: {"json": {"task_id": "nope"}},
        404,
        "unknown task_id 'nope'",
    ),
    (
        "unknown family",
        "POST",
        "/reset",
        lambda t, s: {"json": {"family": "sudoku", "seed": 1}},
        422,
        "invalid task",
    ),
    ("task missing keys", "POST", "/reset", lambda t, s: {"json": {"task": {"id": "x"}}}, 422, "missing key"),
    (
        "task naming a server file",
        "POST",
        "/reset",
        lambda t, s: {
            "json": {"task": {**t.to_dict(), "document": None, "document_path": "../../etc/passwd"}}
        },
        422,
        "must carry 'document' inline",
    ),
    (
        "document too long",
        "POST",
        "/reset",
        lambda t, s: {"json": {"family": "niah", "seed": 1, "length_tokens": 10**9}},
        422,
        "over the server's limit",
    ),
    (
        "unknown session",
        "POST",
        "/step",
        lambda t, s: {"json": {"session_id": "nope", "action": {"text": "x"}}},
        404,
        "unknown session 'nope'",
    ),
    (
        "unknown session state",
        "GET",
        "/state?session_id=nope",
        lambda t, s: {},
        404,
        "unknown session 'nope'",
    ),
    ("unknown session close", "DELETE", "/session/nope", lambda t, s: {}, 404, "unknown session 'nope'"),
    ("state without session", "GET", "/state", lambda t, s: {}, 422, "query.session_id: Field required"),
    (
        "oversized body",
        "POST",
        "/reset",
        lambda t, s: {"content": b"x" * (MAX_BODY + 1)},
        413,
        "body too large",
    ),
    (
        "oversized chunked body",
        "POST",
        "/reset",
        lambda t, s: {"content": _chunks(MAX_BODY * 2)},
        413,
        "body too large",
    ),
]


@pytest.mark.parametrize(
    ("case", "method", "path", "make", "status", "message"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_request(base, witness, task, case, method, path, make, status, message):
    kwargs = make(task, witness.session_id)
    if "content" in kwargs:
        kwargs["headers"] = {"content-type": "application/json"}
    response = httpx.request(method, f"{base}{path}", timeout=30, **kwargs)
    assert response.status_code == status, response.text
    assert message in response.json()["detail"]
    assert_still_serving(base, witness, task)


def test_too_many_sessions(base, witness, task):
    others = [FathomClient(base) for _ in range(MAX_SESSIONS - 1)]
    for client in others:
        client.reset(task_id=task.id)
    refused = httpx.post(f"{base}/reset", json={"task_id": task.id})
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert (
        f"session limit reached: {MAX_SESSIONS} of {MAX_SESSIONS} sessions are open"
        in refused.json()["detail"]
    )
    for client in others:
        client.close()
    assert_still_serving(base, witness, task)


def test_step_after_the_episode_ended(base, witness, task):
    with FathomClient(base) as client:
        client.reset(task_id=task.id)
        assert client.step(f"```repl\nFINAL({task.answer!r})\n```").done
        late = httpx.post(f"{base}/step", json={"session_id": client.session_id, "action": {"text": "x"}})
        assert late.status_code == 409 and "the episode is over" in late.json()["detail"]
        assert client.state.done  # the finished session still answers /state until closed
    assert_still_serving(base, witness, task)


def test_bad_websocket_frames(base, witness, task):
    ws_url = base.replace("http", "ws") + "/ws"

    async def main():
        async with websockets.connect(ws_url, max_size=None) as ws:
            await ws.send("{not json")
            error = json.loads(await ws.recv())
            assert error["type"] == "error" and error["data"]["code"] == "INVALID_JSON"
            await ws.send(json.dumps({"type": "step", "data": {"text": "x", "colour": "red"}}))
            error = json.loads(await ws.recv())
            assert error["data"]["code"] == "VALIDATION_ERROR"
            for data, message in [
                ({"family": "niah", "seed": 1, "length_tokens": 10**9}, "over the server's limit of 50,000"),
                ({"task": {**task.to_dict(), "document": None, "document_path": "/etc/passwd"}}, "inline"),
                ({"task_id": "nope"}, "unknown task_id 'nope'"),
            ]:
                await ws.send(json.dumps({"type": "reset", "data": data}))
                error = json.loads(await ws.recv())
                assert error["type"] == "error" and message in error["data"]["message"]
            await ws.send(json.dumps({"type": "reset", "data": {"task_id": task.id}}))  # still usable
            assert json.loads(await ws.recv())["data"]["observation"]["task_id"] == task.id
        async with websockets.connect(ws_url, max_size=None) as ws:
            await ws.send("x" * (MAX_BODY + 1))
            await asyncio.wait_for(ws.wait_closed(), 10)
            return ws.close_code

    assert asyncio.run(main()) == 1009  # message too big
    assert_still_serving(base, witness, task)


def test_malformed_websocket_messages_keep_the_session(base, witness, task):
    ws_url = base.replace("http", "ws") + "/ws"

    async def main():
        async with websockets.connect(ws_url, max_size=None) as ws:
            await ws.send(json.dumps({"type": "reset", "data": {"task_id": task.id}}))
            assert json.loads(await ws.recv())["data"]["observation"]["task_id"] == task.id
            replies = []
            for frame in [
                "[1, 2]",
                "null",
                '"reset"',
                b'{"type": "state"}',  # a binary frame
                json.dumps({"type": "reset", "data": {"task": "a string"}}),
                json.dumps({"type": "reset", "data": {"family": "niah", "seed": "abc"}}),
                json.dumps({"type": "reset", "data": {"family": "niah", "length_tokens": [5]}}),
                json.dumps({"type": "step", "data": [1, 2]}),
            ]:
                await ws.send(frame)
                replies.append(json.loads(await ws.recv()))
            # the session survived every one of them: its episode still steps
            await ws.send(json.dumps({"type": "step", "data": {"text": "```repl\nprint(len(ctx))\n```"}}))
            after = json.loads(await ws.recv())
            return replies, after

    replies, after = asyncio.run(main())
    assert all(r["type"] == "error" for r in replies), replies
    codes = [r["data"]["code"] for r in replies]
    assert codes[:4] == ["INVALID_JSON"] * 4 and codes[-1] == "VALIDATION_ERROR", codes
    messages = [r["data"]["message"] for r in replies]
    for message, fragment in zip(
        messages,
        [
            "a message must be a JSON object, got an array",
            "a message must be a JSON object, got null",
            "a message must be a JSON object, got a string",
            "send messages as text frames",
            "task: Input should be a valid dictionary",
            "seed: Input should be a valid integer",
            "length_tokens: Input should be a valid integer",
            "Invalid message",
        ],
        strict=True,
    ):
        assert fragment in message, (fragment, message)
    assert after["data"]["observation"]["cells"][0]["stdout"].strip() == str(len(task.document))
    assert_still_serving(base, witness, task)


def test_client_token_counts_are_not_trusted(base, witness, task):
    filler = "# " + "x" * 79_990 + "\n"
    turn = f"{filler}```repl\nFINAL({task.answer!r})\n```"
    rewards, tokens = [], []
    for reported in (0, estimate_tokens(turn), None):
        with FathomClient(base) as client:
            client.reset(task_id=task.id)
            observation = client.step(RLMAction(text=turn, num_tokens=reported))
            assert observation.done and observation.reward_breakdown["correct"] is True
            rewards.append(observation.reward)
            tokens.append(client.state.tokens)
    assert tokens == [estimate_tokens(turn)] * 3  # the server counts the text it received
    assert rewards[0] == rewards[1] == rewards[2]
    assert_still_serving(base, witness, task)
