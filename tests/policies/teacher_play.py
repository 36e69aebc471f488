"""Test helper: the teacher played on tasks through the real rollout engine, with the Qwen2.5 tokenizer the
GPU proof's student has. Not a test module."""

from __future__ import annotations

from typing import Any

from fathom.models import ModelSpec, load_tokenizer
from fathom.policies.readers import teacher_reader
from fathom.policies.teacher import teacher_backend
from fathom.rollout import ChatFormat, RolloutConfig
from fathom.rollout.wiring import build_engine, hf_service


def qwen_chat() -> ChatFormat:
    return ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))


def play_teacher(chat: ChatFormat, tasks: list[Any], max_turns: int, reader: Any = None, backend: Any = None):
    """The episodes of `tasks`, played by `backend` (the teacher by default) with `reader` answering llm()
    (the teacher's reader by default)."""
    engine = build_engine(
        hf_service(backend or teacher_backend(chat)),
        chat,
        RolloutConfig(max_turns=max_turns, max_total_tokens=1 << 20),
        reader or teacher_reader(),
    )
    return engine.run_sync(tasks)
