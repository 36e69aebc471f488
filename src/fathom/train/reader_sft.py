"""SFT examples for the reader role: an `llm()` prompt with its chunk -> the short answer.

While SFT transcripts are collected, `RecordingSubLM` keeps every request the scripted reader answers
(the task layer reading a chunk: `fathom.policies.readers`), so the replies are gold. `reader_example`
renders one as the policy's own sub-LM sees it when it answers `llm()` in training and evaluation
(`fathom.rollout.engine.EngineSubLM._encode`: the chunk cut in tokens to fit ``max_input_tokens``, one user
message under the system line ``"Answer briefly and exactly."``) followed by the reply's tokens and the
end-of-turn token, with loss on the reply only. A test keeps the prompt token-exact with `EngineSubLM`.
A reply longer (with its end-of-turn token) than the policy's reply budget, ``rollout.sub_max_new_tokens``,
is not trained on: the policy would be cut off in it, so the row would teach an answer it cannot give.

Which calls become rows (`reader_examples`): the recorded calls are of three kinds, and a uniform draw mirrors
how often the teacher makes each, not what a reader must learn. Labelling a chunk line by line (oolong,
pairs) is two-thirds of the calls, "not found in this text" (a chunk without the answer) most of the rest, and
a reply that answers the question (the skill an unseen question type needs) under a fifth
(bench/RESULTS.md, "Run 10's reader rows"). So the draw is stratified: `READER_MIX` gives each kind's share of
the rows, and a kind with too few calls leaves its share to the others.

This module does not train; `fathom.train.sft` mixes these rows into its dataset (``sft.reader_ratio``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from fathom.env.sublm import SubLM, SubLMReply, SubLMRequest
from fathom.policies.moves import CLASSIFY_WORDS
from fathom.policies.readers import NOT_FOUND
from fathom.rollout.chat import ChatFormat
from fathom.rollout.engine import sub_prompt_ids

# Each kind's share of the reader rows: answering is what transfers to a new question type, so it leads
READER_MIX = {"answer": 0.5, "missing": 0.25, "label": 0.25}


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


def call_kind(call: dict[str, Any]) -> str:
    """The kind of a recorded reader call: a line-by-line labelling call ("label"), a reply that says the chunk
    lacks the answer ("missing"), or an "answer"."""
    if "categor" in call["prompt"].lower() and CLASSIFY_WORDS in call["prompt"].lower():
        return "label"  # how the teacher's reader knows a labelling prompt, too
    return "missing" if NOT_FOUND in call["reply"].lower() else "answer"


def stratified(calls: list[dict[str, Any]], n: int, rng: random.Random) -> list[dict[str, Any]]:
    """`n` of `calls` (all when fewer), each kind (`call_kind`) taking its `READER_MIX` share; the shares of
    kinds that run out go to the others, in proportion."""
    pools = {kind: [c for c in calls if call_kind(c) == kind] for kind in READER_MIX}
    for pool in pools.values():
        rng.shuffle(pool)
    take = dict.fromkeys(READER_MIX, 0)
    left = min(n, len(calls))
    while left:
        open_kinds = [k for k in READER_MIX if take[k] < len(pools[k])]
        weight = sum(READER_MIX[k] for k in open_kinds)
        # each open kind's share of what is left, at least one row so the loop ends
        step = {
            k: min(len(pools[k]) - take[k], max(1, int(left * READER_MIX[k] / weight))) for k in open_kinds
        }
        for k in open_kinds:
            grant = min(step[k], left)
            take[k] += grant
            left -= grant
    return [c for k in READER_MIX for c in pools[k][: take[k]]]


def draw_calls(
    chat: ChatFormat, calls: list[dict[str, Any]], max_reply_tokens: int, n: int, seed: int
) -> tuple[list[dict[str, Any]], int]:
    """`n` calls drawn without replacement (all of them if there are fewer) from the distinct calls whose
    reply fits `max_reply_tokens`, stratified by kind (`stratified`), and the number of distinct calls left
    out for being longer."""
    unique = list({(c["prompt"], c["chunk"], c["reply"]): c for c in calls}.values())
    fitting = [c for c in unique if len(reply_ids(chat, c["reply"])) <= max_reply_tokens]
    return stratified(fitting, n, random.Random(seed)), len(unique) - len(fitting)


def reader_examples(
    chat: ChatFormat,
    calls: list[dict[str, Any]],
    max_input_tokens: int,
    max_reply_tokens: int,
    n: int,
    seed: int,
) -> tuple[list[dict[str, list[int]]], int]:
    """The SFT rows of `draw_calls`' calls, and the number of distinct calls left out for being longer."""
    picked, over = draw_calls(chat, calls, max_reply_tokens, n, seed)
    return [reader_example(chat, c, max_input_tokens) for c in picked], over
