"""One typed record of an RLM episode, as the rollout engine produced it.

An `Episode` is what SFT, GRPO's ``rollout_func``, evaluation, the demo, the trace files and the report read:
the rendered prompt ids, each model `Turn` (its sampled ids and log-probs, the text, the cells the environment
ran, the `llm()` sub-calls with their own token ids, and the environment reply appended after it), how the
episode ended and its reward breakdown. The token-level views a trainer needs (``completion_ids``,
``env_mask``, ``logprobs``) are derived from the turns, never stored twice.

``to_json`` / ``from_json`` are the trace-file form (one JSON object per episode); `behaviour` is what the
policy did, as counts and 0/1 rates. This module does no I/O and runs nothing.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from fathom.env.models import CellRecord, SubCallRecord
from fathom.reward.compose import RewardBreakdown

CTX_RE = re.compile(r"\bctx\b")


@dataclass
class SubCall:
    """One `llm()` request answered by the engine's own model (token ids kept, so a reader can be trained)."""

    prompt: str
    chunk_chars: int
    reply: str
    depth: int
    prompt_ids: list[int] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    adapter: bool = True  # answered with the policy's adapter on (False: the base weights read)


@dataclass
class Turn:
    """One model turn and what the environment made of it."""

    text: str
    ids: list[int]
    logprobs: list[float] | None
    finished: bool  # the model ended the turn itself (eos / stop string), not the token budget
    observation: str = ""
    observation_ids: list[int] = field(default_factory=list)  # appended after the turn (masked)
    cells: list[CellRecord] = field(default_factory=list)
    subcalls: list[SubCallRecord] = field(default_factory=list)
    answer: Any = None
    end_reason: str | None = None
    generate_s: float = 0.0
    env_s: float = 0.0


@dataclass
class Episode:
    task_id: str
    prompt_ids: list[int]
    system: str = ""
    first: str = ""
    depth: int = 0
    turns: list[Turn] = field(default_factory=list)
    subcalls: list[SubCall] = field(default_factory=list)  # engine-answered llm() calls, in order
    end_reason: str | None = None
    reward: RewardBreakdown | None = None

    # ---- token views for trainers --------------------------------------------------------------
    @property
    def completion_ids(self) -> list[int]:
        return [i for t in self.turns for i in (*t.ids, *t.observation_ids)]

    @property
    def env_mask(self) -> list[int]:
        """1 = sampled by the model (trained), 0 = written by the environment (attended, masked)."""
        return [m for t in self.turns for m in (*[1] * len(t.ids), *[0] * len(t.observation_ids))]

    @property
    def logprobs(self) -> list[float] | None:
        """Sampled tokens' log-probs (0.0 at environment tokens), or None when the backend gave none."""
        if any(t.logprobs is None for t in self.turns):
            return None
        return [x for t in self.turns for x in (*(t.logprobs or []), *[0.0] * len(t.observation_ids))]

    @property
    def model_tokens(self) -> int:
        return sum(len(t.ids) for t in self.turns)

    @property
    def length(self) -> int:
        """Completion-side tokens so far: model turns plus environment replies."""
        return sum(len(t.ids) + len(t.observation_ids) for t in self.turns)

    @property
    def answer(self) -> Any:
        return next((t.answer for t in reversed(self.turns) if t.answer is not None), None)

    @property
    def total_reward(self) -> float | None:
        return None if self.reward is None else self.reward.total

    @property
    def correct(self) -> bool:
        return self.reward is not None and self.reward.correct

    def read_tokens(self) -> int:
        """Tokens the policy conditioned on over all its turns: the prompt plus everything before each turn."""
        total, before = 0, len(self.prompt_ids)
        for t in self.turns:
            total += before
            before += len(t.ids) + len(t.observation_ids)
        return total

    def behaviour(self) -> dict[str, float]:
        """What the policy did in this episode (counts, and 0/1 flags that average to rates)."""
        cells = [c for t in self.turns for c in t.cells]
        logged = [s for t in self.turns for s in t.subcalls]
        answered = self.end_reason == "answered"
        read_doc = any(CTX_RE.search(c.code) for c in cells) or bool(logged)
        model_tokens = self.model_tokens
        return {
            "turns": float(len(self.turns)),
            "code_cells": float(len(cells)),
            "code_errors": float(sum(1 for c in cells if c.error and not c.timed_out)),
            "timeouts": float(sum(1 for c in cells if c.timed_out)),
            "restarts": float(sum(1 for c in cells if c.restarted)),
            "no_code_turns": float(sum(1 for t in self.turns if not t.cells)),
            "subcalls": float(len(logged)),
            "llm_chars": float(sum(s.chunk_chars + len(s.prompt) for s in logged)),
            "answered": float(answered),
            "blind_answer": float(answered and not read_doc),
            "hit_max_turns": float(self.end_reason in ("max_turns", "max_iterations")),
            "hit_token_budget": float(self.end_reason == "token_budget"),
            "model_tokens": float(model_tokens),
            "env_tokens": float(self.length - model_tokens),
        }

    # ---- trace-file form -----------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The trace-file form: everything but the token ids of turns (which `conversation` renders)."""
        return {
            "task_id": self.task_id,
            "system": self.system,
            "first": self.first,
            "depth": self.depth,
            "end_reason": self.end_reason,
            "reward": None if self.reward is None else self.reward.to_dict(),
            "turns": [turn_json(t) for t in self.turns],
            "engine_subcalls": [
                {k: v for k, v in asdict(s).items() if k not in ("prompt_ids", "ids", "logprobs")}
                | {"prompt_tokens": len(s.prompt_ids), "tokens": len(s.ids)}
                for s in self.subcalls
            ],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Episode:
        """Read back a trace (token ids are not in trace files: the turns come back with none)."""
        reward = data.get("reward")
        return cls(
            task_id=str(data["task_id"]),
            prompt_ids=[],
            system=data.get("system") or "",
            first=data.get("first") or "",
            depth=int(data.get("depth", 0)),
            end_reason=data.get("end_reason"),
            reward=None if reward is None else RewardBreakdown.from_dict(reward),
            turns=[
                Turn(
                    text=t.get("text", ""),
                    ids=[],
                    logprobs=None,
                    finished=bool(t.get("finished", False)),
                    observation=t.get("observation", ""),
                    cells=[CellRecord(**c) for c in t.get("cells", [])],
                    subcalls=[SubCallRecord(**s) for s in t.get("subcalls", [])],
                    answer=t.get("answer"),
                    end_reason=t.get("end_reason"),
                    generate_s=float(t.get("generate_s", 0.0)),
                    env_s=float(t.get("env_s", 0.0)),
                )
                for t in data.get("turns", [])
            ],
        )


def turn_json(turn: Turn) -> dict[str, Any]:
    """One turn in the trace-file form (what the demo streams, too)."""
    return {
        "text": turn.text,
        "tokens": len(turn.ids),
        "finished": turn.finished,
        "observation": turn.observation,
        "cells": [c.model_dump() for c in turn.cells],
        "subcalls": [s.model_dump() for s in turn.subcalls],
        "answer": turn.answer,
        "end_reason": turn.end_reason,
        "generate_s": turn.generate_s,
        "env_s": turn.env_s,
    }
