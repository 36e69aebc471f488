"""Policies that are not a neural network, behind the same `Backend` interface as a model.

`ScriptedBackend` answers each prompt with a Python function of the conversation text so far, exactly as a
model reads it; `expert_backend(tasks)` is the expert policy (`fathom.policies.expert`) in that form, so the
expert runs through the same rollout engine as any model and yields token-level transcripts for SFT.
`turn_of(conversation)` is the turn a conversation is at, read from the environment's footer.

This module does not build the baselines that need a model (see `fathom.rollout.direct` for the direct one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from fathom.policies.expert import expert_turn
from fathom.rollout.backends import Generation, Sampling
from fathom.rollout.chat import ChatFormat


class ScriptedBackend:
    """Turns ``fn(conversation_text) -> reply_text`` into token ids ending on the end-of-turn token."""

    def __init__(self, chat: ChatFormat, fn: Callable[[str], str]) -> None:
        self.chat, self.fn = chat, fn
        self.calls = 0

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        self.calls += 1
        tok = self.chat.tokenizer
        out = []
        for ids in prompts:
            reply = self.fn(tok.decode(ids))
            reply_ids = [*tok.encode(reply, add_special_tokens=False), self.chat.eos_id]
            cut = reply_ids[: sampling.max_new_tokens]  # cut off like a model that runs out of new tokens
            out.append(Generation(cut, len(cut) == len(reply_ids), None))
        return out


TURN_FOOTER = re.compile(r"\[turn (\d+)/\d+; \d+ left\]")  # the footer of fathom.env.prompts.render_cells


def turn_of(conversation: str) -> int:
    """The 0-based turn the policy is about to play: the last footer's number, 0 before any."""
    footers = TURN_FOOTER.findall(conversation)
    return int(footers[-1]) if footers else 0


def expert_backend(chat: ChatFormat, tasks: Sequence[Any]) -> ScriptedBackend:
    """The expert as a backend: it finds its task by the question in the prompt and its turn by the
    environment's footer on the last observation ("[turn 2/12; 10 left]" -> turn 2; none yet -> turn 0).

    Not by counting chat-template markers: how a tokenizer decodes a template's last tokens varies across
    transformers releases, and on the GPU image's 5.17 the count skipped a turn (the expert then asked for
    labels it had never computed)."""
    by_question = {t.question: t for t in tasks}

    def reply(conversation: str) -> str:
        task = next((t for q, t in by_question.items() if q in conversation), None)
        if task is None:
            raise ValueError("the expert backend was given a prompt for a task it does not know")
        return expert_turn(task, turn_of(conversation))

    return ScriptedBackend(chat, reply)
