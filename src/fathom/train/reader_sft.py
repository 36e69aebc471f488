"""SFT examples for the reader role: an `llm()` prompt with its chunk -> the short answer.

While SFT transcripts are collected, `RecordingSubLM` keeps every request the scripted reader answers
(the task layer reading a chunk: `fathom.policies.readers`), so the replies are gold. `reader_example`
renders one as the policy's own sub-LM sees it when it answers `llm()` in training and evaluation
(`fathom.rollout.engine.EngineSubLM._encode`: the chunk cut in tokens to fit ``max_input_tokens``, one user
message under the system line ``"Answer briefly and exactly."``) followed by the reply's tokens and the
end-of-turn token, with loss on the reply only. A test keeps the prompt token-exact with `EngineSubLM`.
A reply longer (with its end-of-turn token) than the policy's reply budget, ``rollout.sub_max_new_tokens``,
is not trained on: the policy would be cut off in it, so the row would teach an answer it cannot give.

This module does not train; `fathom.train.sft` mixes these rows into its dataset (``sft.reader_ratio``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from fathom.env.sublm import SubLM, SubLMReply, SubLMRequest
from fathom.rollout.chat import ChatFormat
from fathom.rollout.engine import sub_prompt_ids


class RecordingSubLM:
    """Forwards `llm()` requests to `inner` and keeps (prompt, chunk, reply) of each."""

    def __init__(self, inner: SubLM) -> None:
        self.inner = inner
        self.calls: list[dict[str, str]] = []

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        replies = await self.inner.complete(requests)
        for req, rep in zip(requests, replies, strict=True):
            self.calls.append({"prompt": req.prompt, "chunk": req.chunk, "reply": rep.text})
        return replies


def reader_prompt_ids(chat: ChatFormat, prompt: str, chunk: str, max_input_tokens: int) -> list[int]:
    """The ids the policy reads when it answers ``llm(prompt, chunk)`` as its own sub-LM."""
    return sub_prompt_ids(chat, SubLMRequest(prompt, chunk), max_input_tokens)


def reply_ids(chat: ChatFormat, reply: str) -> list[int]:
    """The ids the policy samples to answer `reply`: its tokens and the end-of-turn token."""
    return [*chat.tokenizer.encode(reply.strip(), add_special_tokens=False), chat.eos_id]


def reader_example(chat: ChatFormat, call: dict[str, str], max_input_tokens: int) -> dict[str, list[int]]:
    """A pre-tokenized SFT row (``input_ids``, ``assistant_masks``) for one recorded reader call."""
    prompt = reader_prompt_ids(chat, call["prompt"], call["chunk"], max_input_tokens)
    reply = reply_ids(chat, call["reply"])
    return {"input_ids": prompt + reply, "assistant_masks": [0] * len(prompt) + [1] * len(reply)}


def reader_examples(
    chat: ChatFormat,
    calls: list[dict[str, Any]],
    max_input_tokens: int,
    max_reply_tokens: int,
    n: int,
    seed: int,
) -> tuple[list[dict[str, list[int]]], int]:
    """`n` examples drawn without replacement (all of them if there are fewer) from the distinct calls whose
    reply fits `max_reply_tokens`, and the number of distinct calls left out for being longer."""
    unique = list({(c["prompt"], c["chunk"], c["reply"]): c for c in calls}.values())
    fitting = [c for c in unique if len(reply_ids(chat, c["reply"])) <= max_reply_tokens]
    picked = random.Random(seed).sample(fitting, min(n, len(fitting)))
    return [reader_example(chat, c, max_input_tokens) for c in picked], len(unique) - len(fitting)
