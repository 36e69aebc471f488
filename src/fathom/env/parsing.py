"""Pull executable code out of a model's turn.

Code runs only from fenced blocks tagged ``repl`` (```` ```repl ````); ```` ```python ```` blocks are accepted
too because small models write them out of habit. Prose, untagged fences and anything else is ignored:
the answer protocol lives inside the REPL (`FINAL(value)`), never in free text.
"""

from __future__ import annotations

import re

_BLOCK = re.compile(r"```(?:repl|python|py)[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL)


def code_blocks(text: str) -> list[str]:
    """The code of every ```repl block in `text`, in order; an unclosed last block runs to the end
    (a turn cut by the token limit still runs what was written)."""
    return [block for block in (m.group(1) for m in _BLOCK.finditer(text)) if block.strip()]
