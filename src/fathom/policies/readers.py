"""Scripted readers: the sub-LMs that answer a scripted policy's `llm()` calls without a model.

- `expert_reader()`: answers exactly the expert's two prompts (classify lines, follow a story) with the
  task layer's own `records.label_of` / `babi.solve`; any other prompt gets "".
- `keyword_reader(prompt, chunk)`: the chunk's lines that share the most words with the prompt (smoke runs,
  the demo's free-form questions, `fathom serve --sub-lm scripted`).
- `teacher_reader()`: the reader behind the teacher (`fathom.policies.teacher`): it labels lines and answers
  a question about a chunk with the task layer's solvers run on that chunk alone.

A reader is the task layer answering a focused question about one chunk; it is not a policy's knowledge.
This module does not run episodes.
"""

from __future__ import annotations

import re

from fathom.env.sublm import ScriptedSubLM
from fathom.policies.expert import CLASSIFY_PROMPT, STORY_PROMPT
from fathom.tasks import babi, records

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{2,}")


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
        return "not found in this text"
    question = prompt.rpartition(READ_MARK)[2].strip()
    for family in FAMILIES.values():
        try:
            return _format(family.solve(question, chunk))
        except (ValueError, LookupError):  # not this family's question, or the chunk does not answer it
            continue
    return "not found in this text"


def teacher_reader() -> ScriptedSubLM:
    """The reader behind the teacher: it labels lines (`records.label_of`) and answers a question about a
    chunk with the task layer's reference solvers run on that chunk alone (``not found in this text`` when
    the chunk does not hold the answer). It reads only what it is given."""
    return ScriptedSubLM(_teacher_read)
