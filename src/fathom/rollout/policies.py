"""Policies that are not a neural network, behind the same `Backend` interface as a model.

`ScriptedBackend` answers each prompt with a Python function of the conversation text so far, exactly as a
model reads it; `expert_backend(tasks)` is the expert policy (`fathom.env.expert`) in that form, so the expert
runs through the same rollout engine as any model and yields token-level transcripts for SFT.

This module does not build the baselines that need a model (see `fathom.rollout.direct` for the direct one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fathom.env.expert import expert_turn
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


def expert_backend(chat: ChatFormat, tasks: Sequence[Any]) -> ScriptedBackend:
    """The expert as a backend: it finds its task by the question in the prompt and its turn by counting."""
    by_question = {t.question: t for t in tasks}
    first = chat.tokenizer.decode(chat.prompt_ids("S", "U"))
    marker = chat.tokenizer.decode(chat.prompt_ids("S", "U")[-3:])  # the tail of the generation prompt
    before = first.count(marker) - 1  # markers already in a fresh prompt (a base model's few-shot prefix)

    def reply(conversation: str) -> str:
        task = next((t for q, t in by_question.items() if q in conversation), None)
        if task is None:
            raise ValueError("the expert backend was given a prompt for a task it does not know")
        turn = conversation.count(marker) - 1 - before
        return expert_turn(task, turn)

    return ScriptedBackend(chat, reply)
