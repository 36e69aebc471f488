"""Wire messages of FATHOM's session-keyed HTTP routes (pydantic; unknown fields are rejected).

Shared by the server (request validation, response models, the OpenAPI schema) and the Python client,
so the two cannot drift. Observations, actions and state are the environment's own OpenEnv types. The
`/ws` protocol is OpenEnv's and is not described here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import ErrorDetails

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


class WireReset(ResetRequest):
    """A reset's arguments as any client sends them (OpenEnv's /ws adds its `episode_id`)."""

    episode_id: str | None = None


def describe_errors(errors: list[ErrorDetails]) -> str:
    """Validation errors as one line, each field by its own name: "seed: Input should be ...; ..."."""
    parts = []
    for e in errors:
        loc = e["loc"][1:] if e["loc"][:1] == ("body",) else e["loc"]  # body fields by their own name
        where = ".".join(str(p) for p in loc) or "body"
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown field {where!r}")
        else:
            parts.append(f"{where}: {e['msg'].removeprefix('Value error, ')}")
    return "; ".join(parts)


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
    active: int = Field(description="Slots in use: every session below plus the resets in progress")
    http: int = Field(description="Sessions made by POST /reset")
    websocket: int = Field(description="Sessions of /ws connections (they end with their connection)")
    mcp: int = Field(description="Sessions made by OpenEnv's openenv/session/create on /mcp")
    max_sessions: int


class HealthResponse(_Message):
    status: str
