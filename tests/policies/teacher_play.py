"""Test helper: the Qwen2.5 tokenizer the GPU proof's student has, and the teacher played through the real
rollout engine (`fathom.policies.teacher.play_teacher`). Not a test module."""

from __future__ import annotations

from fathom.models import ModelSpec, load_tokenizer
from fathom.policies.teacher import play_teacher
from fathom.rollout import ChatFormat

__all__ = ["play_teacher", "qwen_chat"]


def qwen_chat() -> ChatFormat:
    return ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))
