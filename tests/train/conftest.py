"""Shared pieces of the training tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fathom.rollout import ChatFormat


def one_turn_transcript(chat: ChatFormat, task_id: str = "t") -> dict[str, Any]:
    """A correct teacher transcript of one turn (``FINAL('Rome')``), as `fathom sft` reads it from a file."""
    ids = [*chat.tokenizer.encode("```repl\nFINAL('Rome')\n```", add_special_tokens=False), chat.eos_id]
    return {
        "task_id": task_id,
        "family": "niah",
        "length_tokens": 8192,
        "correct": True,
        "prompt_ids": chat.prompt_ids("You write Python.", "Question: Where?"),
        "completion_ids": ids,
        "env_mask": [1] * len(ids),
    }


@pytest.fixture
def transcript() -> Callable[..., dict[str, Any]]:
    return one_turn_transcript
