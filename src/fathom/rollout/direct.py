"""The direct baseline: the model answers from the document cut to its context window, with no REPL.

This is what a long-context QA model does without the scaffold (and what the original FATHOM trained on):
one prompt per task, system "answer from the document, inside <answer></answer>", user "the document, cut
in tokens to fit, then the question" (and the answer format again). The document keeps its beginning; its token budget is
``context_tokens - (everything else in the prompt) - max_new_tokens``, so prompt plus reply never exceed the
context window and the question is always kept whole. Prompts are generated in batches by any `Backend`.

The answer is the last non-empty ``<answer>…</answer>`` (or an unclosed one cut off at the token limit), or
failing that the reply's last non-empty line; either is graded by `fathom.reward.compose` as a submitted
answer (``llm_calls=0, turns=1``), so the baseline gets the benefit of the doubt on format. Where it came
from is kept in `DirectResult.answer_source`.

This module neither loads models nor writes files; see `fathom.eval` for the eval loop around it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from fathom.reward import EpisodeOutcome, RewardBreakdown, RewardConfig, compose
from fathom.rollout.backends import Backend, Sampling
from fathom.rollout.chat import ChatFormat

DIRECT_SYSTEM = (
    "Answer the question using only the document in the user message. The document may be cut off. "
    "Reply with the answer alone inside <answer></answer> tags, for example <answer>42</answer>."
)
# Repeated after the question: small models follow the instruction nearest the end of the prompt.
ANSWER_INSTRUCTION = "Reply with the answer alone inside <answer></answer> tags."
TRUNCATION_NOTE = "\n[... the rest of the document is cut off ...]"
ANSWER_STOP = "</answer>"
# A token rarely spans more than a few characters; reading this many per budgeted token is plenty, and
# spares tokenising a 100 MB document to keep its first 2,000 tokens.
CHARS_PER_TOKEN_BOUND = 16
_TAGGED = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_OPEN = re.compile(r"<answer>(?!.*<answer>)(.*)\Z", re.S | re.I)


@dataclass(frozen=True)
class DirectPrompt:
    ids: list[int]
    doc_tokens: int  # document tokens kept in the prompt
    truncated: bool


@dataclass(frozen=True)
class DirectResult:
    task_id: str
    answer: str | None
    answer_source: str | None  # "tag", "last_line" or None
    text: str
    prompt_tokens: int
    completion_tokens: int
    doc_tokens: int
    truncated: bool
    finished: bool  # the model stopped on its own (eos / </answer>), not at max_new_tokens
    breakdown: RewardBreakdown

    @property
    def end_reason(self) -> str:
        return "answered" if self.answer_source == "tag" else (self.answer_source or "no_answer")


def user_message(document: str, question: str, truncated: bool) -> str:
    note = TRUNCATION_NOTE if truncated else ""
    return f"Document:\n{document}{note}\n\nQuestion: {question}\n{ANSWER_INSTRUCTION}"


def _document_prefix(task: Any, chars: int) -> tuple[str, bool]:
    """The first `chars` characters of the task's document and whether there is more, reading no further."""
    if task.document is not None:
        return task.document[:chars], len(task.document) > chars
    with open(task.document_file(), encoding="utf-8") as f:
        text = f.read(chars + 1)
    return text[:chars], len(text) > chars


def build_prompt(chat: ChatFormat, task: Any, context_tokens: int, max_new_tokens: int) -> DirectPrompt:
    """The prompt ids for `task`, with the document cut so that prompt + reply fit `context_tokens`.

    Raises ValueError when even an empty document leaves no room (the question is never cut)."""
    tok = chat.tokenizer
    overhead = len(chat.prompt_ids(DIRECT_SYSTEM, user_message("", task.question, truncated=True)))
    budget = context_tokens - overhead - max_new_tokens
    if budget < 0:
        raise ValueError(
            f"task {task.id}: the prompt without a document takes {overhead} tokens and the reply "
            f"{max_new_tokens}, over the {context_tokens}-token context"
        )
    text, more = _document_prefix(task, budget * CHARS_PER_TOKEN_BOUND + 64)
    doc_ids = tok.encode(text, add_special_tokens=False)
    truncated = more or len(doc_ids) > budget
    if truncated:
        doc_ids = doc_ids[:budget]
    # Decoding and re-encoding can merge differently at the joins; cut further until the prompt fits.
    while True:
        doc_text = tok.decode(doc_ids) if truncated else text
        ids = chat.prompt_ids(DIRECT_SYSTEM, user_message(doc_text, task.question, truncated))
        excess = len(ids) + max_new_tokens - context_tokens
        if excess <= 0:
            return DirectPrompt(ids, len(doc_ids), truncated)
        truncated = True
        doc_ids = doc_ids[: max(0, len(doc_ids) - excess - 4)]


def parse_answer(text: str) -> tuple[str | None, str | None]:
    """(answer, source): the last non-empty <answer> tag, an unclosed trailing one, else the last line."""
    tagged = [m.strip() for m in _TAGGED.findall(text) if m.strip()]
    if tagged:
        return tagged[-1], "tag"
    unclosed = _OPEN.search(text)
    if unclosed and unclosed.group(1).strip():
        return unclosed.group(1).strip(), "tag"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines:
        return lines[-1], "last_line"
    return None, None


def run_direct(
    backend: Backend,
    chat: ChatFormat,
    tasks: Sequence[Any],
    context_tokens: int,
    sampling: Sampling,
    reward: RewardConfig | None = None,
    batch_size: int = 8,
) -> list[DirectResult]:
    """Answer every task directly; one batched `generate` per `batch_size` tasks."""
    stops = tuple(dict.fromkeys((*sampling.stop_strings, *chat.stop_strings, ANSWER_STOP)))
    sampling = replace(sampling, stop_strings=stops)
    results: list[DirectResult] = []
    for start in range(0, len(tasks), batch_size):
        batch = tasks[start : start + batch_size]
        prompts = [build_prompt(chat, t, context_tokens, sampling.max_new_tokens) for t in batch]
        gens = backend.generate([p.ids for p in prompts], sampling)
        for task, prompt, gen in zip(batch, prompts, gens, strict=True):
            text = chat.turn_text(gen.ids)
            answer, source = parse_answer(text)
            outcome = EpisodeOutcome(
                answer=answer, answered=answer is not None, tokens=len(gen.ids), llm_calls=0, turns=1
            )
            results.append(
                DirectResult(
                    task_id=task.id,
                    answer=answer,
                    answer_source=source,
                    text=text,
                    prompt_tokens=len(prompt.ids),
                    completion_tokens=len(gen.ids),
                    doc_tokens=prompt.doc_tokens,
                    truncated=prompt.truncated,
                    finished=gen.finished,
                    breakdown=compose(task, outcome, reward),
                )
            )
    return results
