"""Clients of `fathom serve`, each with the environment's own interface.

- `FathomClient` (sync) and `AsyncFathomClient` speak FATHOM's session-keyed HTTP routes through httpx:
  ``reset(task=... | task_id=... | family=..., seed=..., length_tokens=...) -> RLMObservation``,
  ``step(RLMAction | str) -> RLMObservation``, ``state -> RLMState``, ``close()`` — the same calls, and
  the same observations, as `RLMEnvironment` in-process.
- `FathomEnvClient` is OpenEnv's `EnvClient` over the `/ws` session protocol, for trainers and tools
  that already drive OpenEnv environments (its `reset`/`step` return OpenEnv `StepResult`s).

A server-side refusal raises `ServerError` carrying the status code and the server's message. This module
holds no policy and never retries: what to do after an error is the caller's decision.
"""

from __future__ import annotations

from typing import Any

import httpx
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from fathom.env import RLMAction, RLMObservation, RLMState
from fathom.server.protocol import ResetRequest, ResetResponse, StepResponse
from fathom.tasks import Task

DEFAULT_TIMEOUT_S = 300.0  # a step may run several cells, each with sub-LM calls


class ServerError(RuntimeError):
    """The server refused a request (4xx) or failed on it (5xx)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail = status, detail


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _http_options(base_url: str, token: str | None, timeout_s: float) -> dict[str, Any]:
    # Loading the CA bundle costs ~50 ms per client; a plain-http URL never uses it.
    verify = base_url.startswith("https://")
    return {"base_url": base_url, "headers": _auth(token), "timeout": timeout_s, "verify": verify}


def _reset_body(
    task: Task | dict[str, Any] | None,
    task_id: str | None,
    family: str | None,
    seed: int | None,
    length_tokens: int | None,
) -> dict[str, Any]:
    if isinstance(task, Task):
        task = task.to_dict()
    request = ResetRequest(task=task, task_id=task_id, family=family, seed=seed, length_tokens=length_tokens)
    return request.model_dump(exclude_none=True)


def _step_body(session_id: str | None, action: RLMAction | str) -> dict[str, Any]:
    if session_id is None:
        raise RuntimeError("step() before reset(): start an episode first")
    if isinstance(action, str):
        action = RLMAction(text=action)
    return {"session_id": session_id, "action": action.model_dump(exclude_defaults=True)}


def _payload(response: httpx.Response) -> dict[str, Any]:
    if response.is_error:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise ServerError(response.status_code, str(detail))
    return response.json()


class FathomClient:
    """One episode at a time over HTTP; `reset` closes the previous session first, so one client (and
    its connection pool) can run many episodes in a row."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._http = httpx.Client(**_http_options(base_url, token, timeout_s))
        self.session_id: str | None = None

    def reset(
        self,
        task: Task | dict[str, Any] | None = None,
        task_id: str | None = None,
        family: str | None = None,
        seed: int | None = None,
        length_tokens: int | None = None,
    ) -> RLMObservation:
        body = _reset_body(task, task_id, family, seed, length_tokens)
        self._end_session()
        reply = ResetResponse.model_validate(_payload(self._http.post("/reset", json=body)))
        self.session_id = reply.session_id
        return reply.observation

    def step(self, action: RLMAction | str) -> RLMObservation:
        body = _step_body(self.session_id, action)
        return StepResponse.model_validate(_payload(self._http.post("/step", json=body))).observation

    @property
    def state(self) -> RLMState:
        if self.session_id is None:
            raise RuntimeError("state before reset(): start an episode first")
        response = self._http.get("/state", params={"session_id": self.session_id})
        return RLMState.model_validate(_payload(response))

    def _end_session(self) -> None:
        session_id, self.session_id = self.session_id, None
        if session_id is not None:
            response = self._http.delete(f"/session/{session_id}")
            if response.status_code != 404:  # 404: the server already reaped it
                _payload(response)

    def close(self) -> None:
        """End the session (its worker stops) and release the connection pool."""
        try:
            self._end_session()
        finally:
            self._http.close()

    def __enter__(self) -> FathomClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncFathomClient:
    """`FathomClient` for asyncio code: the same calls, awaited; `state()` is a method here."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._http = httpx.AsyncClient(**_http_options(base_url, token, timeout_s))
        self.session_id: str | None = None

    async def reset(
        self,
        task: Task | dict[str, Any] | None = None,
        task_id: str | None = None,
        family: str | None = None,
        seed: int | None = None,
        length_tokens: int | None = None,
    ) -> RLMObservation:
        body = _reset_body(task, task_id, family, seed, length_tokens)
        await self._end_session()
        reply = ResetResponse.model_validate(_payload(await self._http.post("/reset", json=body)))
        self.session_id = reply.session_id
        return reply.observation

    async def step(self, action: RLMAction | str) -> RLMObservation:
        body = _step_body(self.session_id, action)
        return StepResponse.model_validate(_payload(await self._http.post("/step", json=body))).observation

    async def state(self) -> RLMState:
        if self.session_id is None:
            raise RuntimeError("state before reset(): start an episode first")
        response = await self._http.get("/state", params={"session_id": self.session_id})
        return RLMState.model_validate(_payload(response))

    async def _end_session(self) -> None:
        session_id, self.session_id = self.session_id, None
        if session_id is not None:
            response = await self._http.delete(f"/session/{session_id}")
            if response.status_code != 404:
                _payload(response)

    async def close(self) -> None:
        try:
            await self._end_session()
        finally:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncFathomClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


class FathomEnvClient(EnvClient[RLMAction, RLMObservation, RLMState]):
    """OpenEnv's WebSocket client, typed for the RLM environment (one session per connection)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        message_timeout_s: float = DEFAULT_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            base_url, message_timeout_s=message_timeout_s, headers=_auth(token) or None, **kwargs
        )

    def _step_payload(self, action: RLMAction) -> dict[str, Any]:
        return action.model_dump(exclude_defaults=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[RLMObservation]:
        # OpenEnv moves reward and done out of the observation; put them back so it matches HTTP's.
        reward, done = payload.get("reward"), payload.get("done", False)
        observation = RLMObservation.model_validate(
            {**payload["observation"], "reward": reward, "done": done}
        )
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> RLMState:
        return RLMState.model_validate(payload)
