"""Scripted readers: the sub-LMs that answer a scripted policy's `llm()` calls without a model.

- `expert_reader()`: answers exactly the expert's two prompts (classify lines, follow a story) with the
  task layer's own `records.label_of` / `babi.solve`; any other prompt gets "".
- `keyword_reader(prompt, chunk)`: the chunk's lines that share the most words with the prompt (smoke runs,
  the demo's free-form questions, `fathom serve --sub-lm scripted`).
- `teacher_reader()`: the reader behind the teacher (`fathom.policies.teacher`); see `fathom.policies.reading`.

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
