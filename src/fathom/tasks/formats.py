"""Shared pieces of the structured-document families: question phrasings, format variation, filler text.

- `Phrasings`: several templates for one question; `write` picks one with the rng, `parse` reads any of
  them back into its slots (the reference solvers parse questions with the templates that wrote them).
- `lines_from(corpora, source)`: single clean lines of a corpus (fortunes, Shakespeare, ...), cached per
  corpora folder, for log messages, comments and free-text cells.
- `Timestamps`: several timestamp styles, each with a regex that reads it back; `moments` draws an
  ascending run of instants.
- `case_style` / `styled`: snake, kebab, camel, upper and title spellings of one multi-word name.
- `fill_to(n_chars, make)`: lines from `make()` until they add up to `n_chars`.
- `RATES`: characters per Qwen2.5 token of each family's documents, measured once with the real
  tokenizer over 8 documents of 32K tokens per family (bench/tasks.py prints the tokenizer's count next
  to each family's; tests/tasks/test_tasks_tokens.py checks every family within 15%).

This module knows no family and writes no task; families-b may reuse it for its own shapes.
"""

from __future__ import annotations

import datetime
import random
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from fathom.tasks.family import InvalidTaskError, find_one
from fathom.tasks.haystack import Corpora

# Characters per Qwen2.5 token of each family's documents (mean over seeds and format variants).
RATES: Mapping[str, float] = MappingProxyType(
    {
        "logs_count": 2.33,
        "logs_next": 2.33,
        "table_aggregate": 1.940,
        "table_compare": 1.831,
        "jsonl_lookup": 2.544,
        "jsonl_join": 1.517,
        "code_calls": 4.516,
        "code_value": 4.375,
        "config_lookup": 2.817,
        "config_sections": 2.830,
    }
)


def chars_for(tokens: int, family: str) -> int:
    return round(tokens * RATES[family])


class Phrasings:
    """Several question templates sharing one set of slots (`{name}` fields with a regex each)."""

    def __init__(self, templates: Sequence[str], slots: Mapping[str, str]):
        if len(templates) < 5:
            raise ValueError("a family needs at least 5 phrasings of its question")
        self.templates = tuple(templates)
        self.patterns = tuple(_template_regex(t, slots) for t in self.templates)

    def write(self, rng: random.Random, **slots: Any) -> str:
        return rng.choice(self.templates).format(**slots)

    def match(self, question: str) -> dict[str, str] | None:
        hits = [m.groupdict() for p in self.patterns if (m := p.fullmatch(question))]
        return find_one(hits, "matching phrasing") if hits else None

    def parse(self, question: str) -> dict[str, str]:
        slots = self.match(question)
        if slots is None:
            raise InvalidTaskError(f"question fits no phrasing: {question!r}")
        return slots


def _template_regex(template: str, slots: Mapping[str, str]) -> re.Pattern[str]:
    """`family.template_regex`, where a slot may appear twice (later uses must repeat the first)."""
    parts = re.split(r"\{(\w+)\}", template)
    seen: set[str] = set()
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 0:
            out.append(re.escape(part))
        elif part in seen:
            out.append(f"(?P={part})")
        else:
            seen.add(part)
            out.append(f"(?P<{part}>{slots[part]})")
    return re.compile("".join(out))


def parse_kind(kinds: Mapping[str, Phrasings], question: str) -> tuple[str, dict[str, str]]:
    """(kind, slots) of a question written by one of several kinds' phrasings."""
    hits = [(k, s) for k, p in kinds.items() if (s := p.match(question)) is not None]
    return find_one(hits, "question kind")


_CLEAN_LINE = re.compile(r"^[A-Za-z][A-Za-z ,.'!?;:-]{18,88}[a-z.!?]$")


@lru_cache(maxsize=16)
def _lines(root: str, source: str) -> tuple[str, ...]:
    text = Corpora(root).text(source)
    out = {" ".join(line.split()) for line in text.split("\n")}
    return tuple(sorted(line for line in out if _CLEAN_LINE.match(line) and '"' not in line))


def lines_from(corpora: Corpora, source: str) -> tuple[str, ...]:
    """Distinct single lines of plain prose (20 to 90 characters, letters and punctuation) of a corpus."""
    return _lines(str(corpora.root), source)


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
EPOCH = datetime.datetime(2024, 1, 1)


def _iso(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _space(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def _syslog(t: datetime.datetime) -> str:
    return f"{MONTHS[t.month - 1]} {t.day:2d} {t:%H:%M:%S}"


def _clf(t: datetime.datetime) -> str:
    return f"{t.day:02d}/{MONTHS[t.month - 1]}/{t.year}:{t:%H:%M:%S} +0000"


# style -> (writer, regex of what it writes)
TIMESTAMPS: Mapping[str, tuple[Callable[[datetime.datetime], str], str]] = MappingProxyType(
    {
        "iso": (_iso, r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"),
        "space": (_space, r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"),
        "syslog": (_syslog, r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d"),
        "clf": (_clf, r"\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000"),
    }
)


def moments(rng: random.Random, n: int, mean_gap_ms: int = 900) -> list[datetime.datetime]:
    """`n` ascending instants from a random day of 2024, about `mean_gap_ms` apart."""
    t = EPOCH + datetime.timedelta(days=rng.randrange(300), seconds=rng.randrange(86_400))
    out = []
    for _ in range(n):
        t += datetime.timedelta(milliseconds=1 + int(rng.expovariate(1 / mean_gap_ms)))
        out.append(t)
    return out


CASE_STYLES = ("snake", "kebab", "camel", "upper", "title")


def styled(words: Sequence[str], style: str) -> str:
    """One name in a case style: ('retry', 'limit') -> retry_limit, retry-limit, retryLimit, ..."""
    if style == "snake":
        return "_".join(words)
    if style == "kebab":
        return "-".join(words)
    if style == "camel":
        return words[0] + "".join(w.title() for w in words[1:])
    if style == "upper":
        return "_".join(w.upper() for w in words)
    return " ".join(w.title() for w in words)


def fill_to(n_chars: int, make: Callable[[], str], min_lines: int = 0) -> list[str]:
    """Lines from `make()` until they (with their newlines) add up to `n_chars`, and at least `min_lines`."""
    out: list[str] = []
    total = 0
    while total < n_chars or len(out) < min_lines:
        line = make()
        out.append(line)
        total += len(line) + 1
    return out


def distinct(rng: random.Random, make: Callable[[], Any], n: int, taken: set | None = None) -> list:
    """`n` distinct values of `make()`, none of them in `taken` (which is updated)."""
    taken = set() if taken is None else taken
    out = []
    while len(out) < n:
        value = make()
        if value not in taken:
            taken.add(value)
            out.append(value)
    return out


def hex_id(rng: random.Random, n: int = 8) -> str:
    return f"{rng.getrandbits(4 * n):0{n}x}"


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"
