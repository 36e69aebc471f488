"""Test helpers: the Qwen2.5 tokenizer the GPU proof's student has, and running one of the teacher's cells as
the REPL would. Not a test module."""

from __future__ import annotations

import contextlib
import io

from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat


def qwen_chat() -> ChatFormat:
    return ChatFormat(load_tokenizer(ModelSpec("tiny-qwen")))


def cell_code(turn: str) -> str:
    """The code of a turn's ```repl block."""
    return turn.split("```repl\n")[1].split("```")[0]


def run_cell(turn: str, env: dict) -> str:
    """Run a turn's cell in `env` (the REPL's namespace: `ctx`, `FINAL`, earlier cells' names); what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell_code(turn), env)
    return out.getvalue()
