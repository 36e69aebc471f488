"""Wire messages of FATHOM's session-keyed HTTP routes (pydantic; unknown fields are rejected).

Shared by the server (request validation, response models, the OpenAPI schema) and the Python client,
so the two cannot drift. Observations, actions and state are the environment's own OpenEnv types. The
`/ws` protocol is OpenEnv's and is not described here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fathom.env import RLMAction, RLMObservation


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResetRequest(_Message):
    """Start an episode in a new session: exactly one of `task`, `task_id`, `family` (+ `seed`)."""

    task: dict[str, Any] | None = Field(default=None, description="A task in the task-file schema")
    task_id: str | None = Field(default=None, description="The id of a task given to `fathom serve --tasks`")
    family: str | None = Field(default=None, description="Generate a task of this family")
    seed: int | None = Field(default=None, description="Generator seed (with `family`)")
    length_tokens: int | None = Field(default=None, ge=1, description="Document length (with `family`)")

    @model_validator(mode="after")
    def _one_source(self) -> ResetRequest:
        given = [name for name in ("task", "task_id", "family") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of task, task_id, family; got {given or 'none'}")
        if self.family is None and (self.seed is not None or self.length_tokens is not None):
            raise ValueError("seed and length_tokens only go with family")
        return self


class ResetResponse(_Message):
    session_id: str
    observation: RLMObservation


class StepRequest(_Message):
    session_id: str
    action: RLMAction


class StepResponse(_Message):
    observation: RLMObservation
    reward: float | None = Field(description="The episode's reward on its last step, else null")
    done: bool


class CloseResponse(_Message):
    session_id: str
    closed: bool


class SessionsResponse(_Message):
    active: int = Field(description="Slots in use: HTTP sessions, resets in progress and WebSockets")
    http: int
    websocket: int
    max_sessions: int


class HealthResponse(_Message):
    status: str
