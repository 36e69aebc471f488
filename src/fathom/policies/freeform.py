"""The demo's expert for one live episode: the family's script when the task has one, else a free-form one.

`free_form_turn` is for a pasted question that no family knows: it greps the question's words, then has
`llm()` read every chunk (read by `keyword_reader`): a scaffold demo, not a solver. `demo_expert` pairs
the script with its reader. This module does not serve HTTP or build tasks (`fathom.server.demo_runs`).
"""

from __future__ import annotations

import itertools

from fathom.env.sublm import ScriptedSubLM, SubLM
from fathom.policies.expert import CHUNK_CHARS, EXPERTS, expert_turn
from fathom.policies.readers import expert_reader, keyword_reader
from fathom.policies.scripted import ScriptedBackend
from fathom.rollout.chat import ChatFormat
from fathom.tasks import Task


def free_form_turn(task: Task, turn: int) -> str:
    """The expert on a question no family knows: grep the question's words, then let llm() read chunks."""
    if turn == 0:
        code = f"""
import re
question = {task.question!r}
words = {{w.lower() for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9_-]{{3,}}", question)}}
lines = [line for line in ctx.splitlines() if words & set(re.findall(r"[a-z0-9_-]+", line.lower()))]
print(len(ctx), "chars;", len(lines), "lines share a word with the question")
print(lines[:5])
"""
        return f"No task format fits this question: I look for lines that share its words.\n```repl{code}```"
    code = f"""
chunks = [ctx[i:i + {CHUNK_CHARS}] for i in range(0, len(ctx), {CHUNK_CHARS})]
replies = llm_batch([(question, chunk) for chunk in chunks])
found = [r for r in replies if r.strip() and r != "(nothing relevant found)"]
print(len(chunks), "chunks read;", len(found), "with an answer")
FINAL(found[0] if found else "not found")
"""
    return f"Let llm() read the document chunk by chunk and take the first answer.\n```repl{code}```"


def demo_expert(chat: ChatFormat, task: Task) -> tuple[ScriptedBackend, SubLM]:
    """The expert as a backend for one episode, and the reader for its llm() calls."""
    script = expert_turn if task.family in EXPERTS else free_form_turn
    # One episode per engine run: each generate call is the next turn, so a counter numbers them.
    turns = itertools.count()
    backend = ScriptedBackend(chat, lambda _conversation: script(task, next(turns)))
    reader = expert_reader() if task.family in EXPERTS else ScriptedSubLM(keyword_reader)
    return backend, reader
