"""Typed messages of the RLM environment, on OpenEnv's base types (pydantic; unknown fields rejected).

`RLMAction` is one model turn as raw text. `RLMObservation` is what the environment returns: the text the
model sees next plus structured fields for trainers, logs and the web viewer. `RLMState` is the episode's
bookkeeping. Nothing here has behaviour.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import BaseModel, ConfigDict, Field


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RLMAction(Action):
    text: str = Field(description="The model's raw turn; code in ```repl blocks runs in order")
    num_tokens: int | None = Field(
        default=None, ge=0, description="Tokens the policy generated for this turn (estimated if absent)"
    )


class CellRecord(_Record):
    """One executed code block."""

    code: str
    stdout: str = ""
    error: str | None = None
    truncated_chars: int = 0
    elapsed_s: float = 0.0
    timed_out: bool = False
    restarted: bool = False


class SubCallRecord(_Record):
    """One `llm()` request, as logged."""

    prompt: str = Field(description="the prompt, cut to 500 characters for the log")
    chunk_chars: int
    reply: str = Field(description="the reply, cut to 500 characters for the log")
    depth: int
    elapsed_s: float


class RLMObservation(Observation):
    text: str = Field(description="What the model is shown next (the user turn)")
    system_prompt: str | None = Field(default=None, description="Only on reset")
    question: str | None = None
    task_id: str | None = None
    family: str | None = None
    doc_chars: int | None = None
    doc_tokens: int | None = None
    doc_type: str | None = None
    iteration: int = 0
    max_iterations: int = 0
    cells: list[CellRecord] = Field(default_factory=list)
    subcalls: list[SubCallRecord] = Field(default_factory=list)
    answer_ready: bool = False
    answer: Any = None
    end_reason: str | None = Field(default=None, description="answered | max_iterations | token_budget")
    reward_breakdown: dict[str, Any] | None = None


class RLMState(State):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    task_id: str | None = None
    family: str | None = None
    iteration: int = 0
    max_iterations: int = 0
    tokens: int = 0
    llm_calls: int = 0
    llm_chars: int = 0
    restarts: int = 0
    answer_ready: bool = False
    answer: Any = None
    done: bool = False
    isolation: list[str] = Field(default_factory=list)
