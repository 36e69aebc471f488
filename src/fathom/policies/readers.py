"""Scripted readers: the sub-LMs that answer a scripted policy's `llm()` calls without a model.

- `expert_reader()`: answers exactly the expert's two prompts (classify lines, follow a story) with the
  task layer's own `records.label_of` / `babi.solve`; any other prompt gets "".
- `keyword_reader(prompt, chunk)`: the chunk's lines that share the most words with the prompt (smoke runs,
  the demo's free-form questions, `fathom serve --sub-lm scripted`).
- `teacher_reader()`: the reader behind the teacher (`fathom.policies.teacher`): it labels lines and answers
  a question about a chunk with the task layer's solvers run on that chunk alone.
- `EchoingReader(inner, share, seed)`: `inner` with a share of its not-found replies turned into a name the
  question asks about (SFT error-recovery demonstrations: `sft.reader_echo`).
- `ReaderView(inner, chat, max_input_tokens)`: `inner` reading each request as the engine's own sub-LM is
  shown it (cut to its input budget), so a scripted reader answers from what a student's reader would see.

A reader is the task layer answering a focused question about one chunk; it is not a policy's knowledge.
This module does not run episodes.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from fathom.env.sublm import ScriptedSubLM, SubLM, SubLMReply, SubLMRequest
from fathom.policies.expert import CLASSIFY_PROMPT, STORY_PROMPT
from fathom.policies.moves import MISSING
from fathom.tasks import babi, records

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{2,}")
NOT_FOUND = f"{MISSING} in this text"  # the teacher reader's reply when the chunk does not hold the answer


def _expert_read(prompt: str, chunk: str) -> str:
    if prompt == CLASSIFY_PROMPT:
        return "\n".join(records.label_of(line) for line in chunk.splitlines() if line.strip())
    if prompt.startswith(STORY_PROMPT):
        return babi.solve(prompt[len(STORY_PROMPT) :], chunk)
    return ""


def expert_reader() -> ScriptedSubLM:
    """The simulated competent reader that answers the expert's `llm()` calls."""
    return ScriptedSubLM(_expert_read)


def keyword_reader(prompt: str, chunk: str, max_lines: int = 3) -> str:
    """The chunk's lines that share the most words with the prompt, in document order."""
    wanted = {w.lower() for w in WORD.findall(prompt)}
    scored = []
    for i, line in enumerate(chunk.splitlines()):
        hits = len(wanted & {w.lower() for w in WORD.findall(line)})
        if hits:
            scored.append((-hits, i, line.strip()))
    best = sorted(sorted(scored)[:max_lines], key=lambda t: t[1])
    return "\n".join(line for _, _, line in best) or "(nothing relevant found)"


def _format(answer: object) -> str:
    if isinstance(answer, list):
        return ", ".join(str(a) for a in answer)
    return str(answer)


def _teacher_read(prompt: str, chunk: str) -> str:
    from fathom.policies.moves import CLASSIFY_WORDS, READ_MARK
    from fathom.tasks import FAMILIES

    lower = prompt.lower()
    if "categor" in lower and CLASSIFY_WORDS in lower:
        out = []
        for line in chunk.splitlines():
            if line.strip():
                try:
                    out.append(records.label_of(line.strip()))
                except ValueError:  # not a record instance: a reader cannot name its category either
                    out.append("unknown")
        return "\n".join(out)
    if READ_MARK not in prompt:
        return NOT_FOUND
    question = prompt.rpartition(READ_MARK)[2].strip()
    for family in FAMILIES.values():
        try:
            return _format(family.solve(question, chunk))
        except (ValueError, LookupError):  # not this family's question, or the chunk does not answer it
            continue
    return NOT_FOUND


def teacher_reader() -> ScriptedSubLM:
    """The reader behind the teacher: it labels lines (`records.label_of`) and answers a question about a
    chunk with the task layer's reference solvers run on that chunk alone (``not found in this text`` when
    the chunk does not hold the answer). It reads only what it is given."""
    return ScriptedSubLM(_teacher_read)


def _share_draw(seed: int, prompt: str, chunk: str) -> int:
    digest = hashlib.sha256(f"{seed}\0{prompt}\0{chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


class EchoingReader:
    """A reader that errs as a small model does: `share` of `inner`'s not-found replies become a name the
    question asks about (`moves.asked_about`), drawn per (seed, prompt, chunk) so a collection replays
    exactly. Count questions keep their reply: the teacher's answer check does not apply to a count, so an
    echo there would teach no recovery. `echoed` holds the (prompt, chunk) of every reply it replaced, so
    those wrong replies can be kept out of training."""

    def __init__(self, inner: SubLM, share: float, seed: int) -> None:
        if not 0 <= share <= 1:
            raise ValueError(f"the echo share must be in [0, 1], got {share}")
        self.inner, self.share, self.seed = inner, share, seed
        self.echoed: set[tuple[str, str]] = set()

    def echo(self, prompt: str, chunk: str) -> str | None:
        """The name this reader hands back instead of a not-found reply to (prompt, chunk), or None."""
        from fathom.policies.looking import read_question
        from fathom.policies.moves import READ_MARK, asked_about

        if READ_MARK not in prompt:
            return None
        q = read_question(prompt.rpartition(READ_MARK)[2].strip())
        names = [] if q.count else asked_about(q)
        draw = _share_draw(self.seed, prompt, chunk)
        if not names or (draw >> 11) / 2**53 >= self.share:
            return None
        return names[draw % len(names)]

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        replies = await self.inner.complete(requests)
        out = []
        for req, rep in zip(requests, replies, strict=True):
            name = self.echo(req.prompt, req.chunk) if rep.text.strip() == NOT_FOUND else None
            if name is None:
                out.append(rep)
            else:
                self.echoed.add((req.prompt, req.chunk))
                out.append(SubLMReply(name))
        return out


class ReaderView:
    """`inner` shown each `llm()` request as the engine's own sub-LM is shown it: cut to `max_input_tokens` of
    `chat`'s tokens (`fathom.rollout.engine.cut_request`). SFT collection and the teacher's evaluation read
    through it, so the teacher's transcripts show what reading achieves for a student whose reader sees that
    much, and a reader row never pairs a chunk with an answer from past its cut."""

    def __init__(self, inner: SubLM, chat: object, max_input_tokens: int) -> None:
        self.inner, self.chat, self.max_input_tokens = inner, chat, max_input_tokens
        self.cut = 0  # requests whose chunk was cut

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        from fathom.rollout.engine import cut_request

        shown = [cut_request(self.chat, r, self.max_input_tokens) for r in requests]  # type: ignore[arg-type]
        self.cut += sum(len(b.chunk) < len(a.chunk) for a, b in zip(requests, shown, strict=True))
        return await self.inner.complete(shown)
