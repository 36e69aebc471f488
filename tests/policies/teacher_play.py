"""Test helper: the Qwen2.5 tokenizer the GPU proof's student has. Not a test module."""

from __future__ import annotations

from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat


def qwen_chat() -> ChatFormat:
    return ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))
