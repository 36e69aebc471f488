"""Every text the environment shows the model: the system prompt, the first user message, and how a
turn's REPL results are rendered back. One place, so the scaffold can be read (and changed) at once.

This module only formats text; it does not run code or decide when an episode ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SYSTEM_PROMPT = """\
You answer questions about a document that is far too long to read at once. The document is stored \
in a Python REPL as the string variable `ctx`; you never see it directly, only what your code prints.

Each turn, write Python in a ```repl code block. It runs in a persistent REPL: variables survive \
between turns. Long output is truncated, so print only what you need (a slice, a count, a few matches).

In the REPL you have:
- `ctx`: the document (str). Slice it, search it with `re` or `str.find`, split it into lines.
- `llm(prompt, chunk)`: ask a helper language model a question about a piece of text (keep each \
chunk under {chunk_chars} characters); returns a str. Use it only where reading is needed; \
prefer code for searching and counting.
- `llm_batch([(prompt, chunk), ...])`: many `llm` calls at once; returns a list of str.
- `FINAL(value)`: submit your final answer (a string, a number, or a list) and end the episode.

Example:
```repl
import re
hits = [m.start() for m in re.finditer(r"magic number", ctx)]
print(len(hits), ctx[hits[0]-100:hits[0]+100] if hits else "none")
```
Give the exact value the question asks for, in the form it asks for, through FINAL."""

NO_CODE_MESSAGE = (
    "No ```repl``` code block found. Write Python in a ```repl block; call FINAL(answer) "
    "from code when you know the answer."
)


@dataclass(frozen=True)
class CellView:
    """What the model is shown of one executed code block."""

    stdout: str
    error: str | None
    truncated_chars: int
    timed_out: bool
    restarted: bool


def system_prompt(chunk_chars: int) -> str:
    return SYSTEM_PROMPT.format(chunk_chars=f"{chunk_chars:,}")


def first_user_message(question: str, doc_chars: int, doc_tokens: int, depth_available: bool) -> str:
    helper = "" if depth_available else "\n`llm` and `llm_batch` are not available in this episode."
    return (
        f"Question: {question}\n\n"
        f"`ctx` is a str of {doc_chars:,} characters (about {doc_tokens:,} tokens).{helper}\n"
        "Start by looking at the document with code."
    )


def render_cells(cells: Sequence[CellView], iteration: int, max_iterations: int) -> str:
    """The environment's reply to one model turn."""
    if not cells:
        body = NO_CODE_MESSAGE
    else:
        parts = []
        for i, cell in enumerate(cells, 1):
            label = f"[cell {i}]" if len(cells) > 1 else "[output]"
            text = cell.stdout
            if cell.truncated_chars:
                text += f"\n[... {cell.truncated_chars:,} chars truncated]"
            if cell.error:
                text += ("\n" if text else "") + cell.error.rstrip()
            if cell.restarted:
                text += "\n[the REPL was restarted: all variables were lost; `ctx` is loaded again]"
            parts.append(f"{label}\n{text.rstrip() or '(no output)'}")
        body = "\n".join(parts)
    remaining = max_iterations - iteration
    return f"{body}\n\n[turn {iteration}/{max_iterations}; {remaining} left]"
