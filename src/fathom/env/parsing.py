"""Pull executable code out of a model's turn.

Code runs from fenced blocks tagged ``repl`` (```` ```repl ````). ```` ```python ```` and untagged ```` ``` ````
blocks run too, because small models write them out of habit (untrained SmolLM2 writes bare fences);
blocks tagged with any other language (```` ```text ````, ```` ```bash ````) and all prose are ignored: the
answer protocol lives inside the REPL (`FINAL(value)`), never in free text.
"""

from __future__ import annotations

RUNNABLE_TAGS = ("repl", "python", "py", "")


def code_blocks(text: str) -> list[str]:
    """The code of every runnable fenced block in `text`, in order. Fences pair up line by line, so the
    closing fence of a ```text block is never read as an opening one; an unclosed last block runs to the end
    (a turn cut by the token limit still runs what was written)."""
    blocks: list[str] = []
    tag: str | None = None  # None: outside a block
    lines: list[str] = []
    for line in text.split("\n"):
        stripped = line.strip()
        if tag is None:
            if stripped.startswith("```"):
                tag, lines = stripped[3:].strip().lower(), []
        elif stripped == "```":
            if tag in RUNNABLE_TAGS and "\n".join(lines).strip():
                blocks.append("\n".join(lines))
            tag = None
        else:
            lines.append(line)
    if tag in RUNNABLE_TAGS and "\n".join(lines).strip():
        blocks.append("\n".join(lines))
    return blocks
