"""Shared pieces of the prose-shaped families (chat, e-mail, glossary, manual, bundle, changelog).

- `Snippets`: single-line pieces of one corpus (whitespace flattened), cut at word boundaries, for
  message bodies, definitions and paragraphs. `prose_source` picks a corpus big enough for the length,
  so a 1M-token document never wraps around its corpus (wrapped text would repeat every quote).
- `Budget`: the estimated Qwen2.5 token count of a document built piece by piece: prose at its corpus's
  flattened rate (`FLAT_CHARS_PER_TOKEN`), structure (timestamps, headers, table rules) at one token per
  digit plus `STRUCT_CHARS_PER_TOKEN` for the rest (Qwen2.5 splits numbers into single digits).
- `Phrasings`: several templates for one question; `write` picks one, `parse` reads the slots back with
  the very templates that wrote them (exactly one must fit).
- People (`people`, `email_address`), timestamps in several styles (`TIME_STYLES`, `format_time`,
  `time_regex`, `parse_time`), quotes that occur once in a document (`unique_quote`), pseudo-words.

This module holds no family logic and does not pick questions.
"""

from __future__ import annotations

import datetime
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from fathom.tasks.family import find_one, template_regex
from fathom.tasks.haystack import Corpora, take
from fathom.tasks.words import PEOPLE

# Prose corpora only: stdlib code reads badly as a chat message or a definition.
PROSE_SOURCES = ("shakespeare", "kjv", "pydoc", "fortunes")
# Characters per Qwen2.5 token of each corpus once its whitespace is collapsed to single spaces
# (20 windows of 20K characters each, measured with the real tokenizer as bench/tasks.py does).
FLAT_CHARS_PER_TOKEN = MappingProxyType({"shakespeare": 3.75, "kjv": 3.77, "pydoc": 4.17, "fortunes": 4.22})
STRUCT_CHARS_PER_TOKEN = 2.1
# Headers made of words and addresses (e-mail headers, directories) tokenize like prose.
WORDY_CHARS_PER_TOKEN = 2.7
_DIGITS = "0123456789"

SURNAMES: tuple[str, ...] = tuple(
    """
    Abbott Acosta Adler Alvarez Baird Barros Becker Bianchi Blake Bowen Brandt Carver Castro Chen Clarke
    Dalton Dimitrov Duarte Eklund Ellis Farah Fischer Flores Garner Gupta Haas Hale Holm Ibarra Ishikawa
    Jansen Jovanovic Kader Keller Kowalski Kumar Lang Larsen Lopez Marsh Meyer Moreno Nakamura Nash Novak
    Okafor Olsen Ortiz Park Patel Pereira Quinn Ramos Reyes Rossi Sato Schmidt Shaw Silva Sousa Stone
    Tanaka Torres Ueda Vance Varga Vogel Walsh Weber Wolff Yilmaz Young Zhang Zimmer
    """.split()  # noqa: SIM905 (a word list reads better as text)
)


class Person(NamedTuple):
    first: str
    last: str

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"


def people(rng: random.Random, n: int) -> list[Person]:
    """`n` distinct people; first names are distinct too, so a first name alone names one person."""
    if n > len(PEOPLE):
        raise ValueError(f"at most {len(PEOPLE)} people, asked for {n}")
    return [Person(f, rng.choice(SURNAMES)) for f in rng.sample(PEOPLE, n)]


EMAIL_STYLES = ("first.last", "flast", "first_l", "firstl")


def email_address(person: Person, style: str, domain: str) -> str:
    first, last = person.first.lower(), person.last.lower()
    local = {
        "first.last": f"{first}.{last}",
        "flast": f"{first[0]}{last}",
        "first_l": f"{first}_{last[0]}",
        "firstl": f"{first}{last[0]}",
    }[style]
    return f"{local}@{domain}"


def prose_source(rng: random.Random, corpora: Corpora, prose_chars: int) -> str:
    """A prose corpus with at least 1.2x `prose_chars` of text (the window must not wrap)."""
    fits = [s for s in PROSE_SOURCES if len(corpora.text(s)) >= 1.2 * prose_chars]
    if not fits:
        raise ValueError(f"no prose corpus holds {prose_chars} characters")
    return rng.choice(fits)


class Snippets:
    """Consecutive single-line pieces of one window of a corpus, cut at spaces."""

    def __init__(self, corpora: Corpora, rng: random.Random, source: str, n_chars: int):
        self.rng = rng
        self.text = " ".join(take(corpora.text(source), rng, n_chars).split()).replace('"', "'")
        self.pos = 0

    def next(self, low: int, high: int) -> str:
        """A piece of about `low` to `high` characters (whole words; never empty)."""
        if self.pos >= len(self.text) - high:  # used up (the caller's estimate was short): start again
            self.pos = 0
        end = self.pos + self.rng.randint(low, high)
        cut = self.text.find(" ", end)
        cut = len(self.text) if cut < 0 else cut
        piece, self.pos = self.text[self.pos : cut], cut + 1
        return piece


@dataclass
class Budget:
    """Estimated tokens of a document so far (see the module docstring for the rates)."""

    source: str
    tokens: float = 0.0

    def prose(self, text: str) -> str:
        self.tokens += len(text) / FLAT_CHARS_PER_TOKEN[self.source]
        return text

    def struct(self, text: str, rate: float = STRUCT_CHARS_PER_TOKEN) -> str:
        """Structure text; `rate` is chars per token of its non-digits (words tokenize better than rules)."""
        digits = sum(map(text.count, _DIGITS))
        self.tokens += digits + (len(text) - digits) / rate
        return text

    def line(self, struct: str, prose: str) -> str:
        """One line of structure followed by prose; returns the two joined."""
        self.struct(struct + "\n")
        return struct + self.prose(prose)


@dataclass(frozen=True)
class Phrasings:
    """Templates for one kind of question; all share the slot names in `slots`."""

    templates: tuple[str, ...]
    slots: Mapping[str, str]
    _regexes: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regexes = tuple(template_regex(t, self.slots) for t in self.templates)
        object.__setattr__(self, "_regexes", regexes)

    def write(self, rng: random.Random, **slots: str) -> str:
        return rng.choice(self.templates).format(**slots)

    def template_of(self, question: str) -> int | None:
        """Index of the template that wrote `question`, or None."""
        return next((i for i, r in enumerate(self._regexes) if r.fullmatch(question)), None)

    def match(self, question: str) -> dict[str, str] | None:
        hits = [m.groupdict() for r in self._regexes if (m := r.fullmatch(question))]
        return find_one(hits, "question template") if hits else None


def parse_kind(kinds: Mapping[str, Phrasings], question: str) -> tuple[str, dict[str, str]]:
    """(kind, slots) of a question written by one of `kinds`; InvalidTaskError unless exactly one fits."""
    hits = [(k, slots) for k, p in kinds.items() if (slots := p.match(question)) is not None]
    return find_one(hits, "question kind")


QUOTE = r"[^\"“”]+"  # a quote slot: quotes are cut from flattened text with no double quotes in it


def unique_quote(rng: random.Random, body: str, document: str, words: int = 7) -> str | None:
    """A run of `words` words of `body` that occurs exactly once in `document`, or None."""
    tokens = body.split()
    if len(tokens) < words:
        return None
    for _ in range(4):
        start = rng.randrange(len(tokens) - words + 1)
        quote = " ".join(tokens[start : start + words]).strip(" ,;:.!?'()-")
        if len(quote) >= 20 and "“" not in quote and "”" not in quote and document.count(quote) == 1:
            return quote
    return None


def quote_style(rng: random.Random) -> tuple[str, str]:
    return rng.choice((('"', '"'), ("“", "”")))


# Timestamp styles: each is written by `format_time` and read by `time_regex` / `parse_time`.
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTH_NAMES = (
    "January February March April May June July August September October November December".split()  # noqa: SIM905
)
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
TIME_STYLES = ("iso", "iso_t", "us12", "eu24", "rfc", "long")
# Minute-resolution styles, for times written in questions.
MINUTE_STYLES = ("iso_min", "us12", "eu24", "long")
_TIME_RES = {
    "iso": r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}",
    "iso_t": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}Z",
    "iso_min": r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}",
    "us12": r"\d{2}/\d{2}/\d{4} \d{1,2}:\d{2} [AP]M",
    "eu24": r"\d{2}\.\d{2}\.\d{4} \d{2}:\d{2}",
    "rfc": r"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2}",
    "long": r"\d{1,2} [A-Z][a-z]+ \d{4}, \d{2}:\d{2}",
}
_TIME_FORMATS = {
    "iso": "%Y-%m-%d %H:%M:%S",
    "iso_t": "%Y-%m-%dT%H:%MZ",
    "iso_min": "%Y-%m-%d %H:%M",
    "us12": "%m/%d/%Y %I:%M %p",
    "eu24": "%d.%m.%Y %H:%M",
}


def format_time(t: datetime.datetime, style: str) -> str:
    """Locale-free: month and weekday names come from this module, never from `strftime`."""
    if style in _TIME_FORMATS:
        return t.strftime(_TIME_FORMATS[style].replace("%p", "AM" if t.hour < 12 else "PM"))
    if style == "rfc":
        return f"{WEEKDAYS[t.weekday()]}, {t.day:02d} {MONTHS[t.month - 1]} {t.year} {t:%H:%M:%S}"
    return f"{t.day} {MONTH_NAMES[t.month - 1]} {t.year}, {t:%H:%M}"


def time_regex(style: str) -> str:
    return _TIME_RES[style]


def parse_time(text: str, style: str) -> datetime.datetime:
    if style in _TIME_FORMATS:
        fmt = _TIME_FORMATS[style]
        if style == "us12":  # %p is locale-dependent; read AM/PM by hand
            t = datetime.datetime.strptime(text[:-3], fmt.replace(" %p", "").replace("%I", "%H"))
            return t.replace(hour=t.hour % 12 + (12 if text.endswith("PM") else 0))
        return datetime.datetime.strptime(text, fmt)
    if style == "rfc":
        _, day, month, year, clock = text.replace(",", "").split()
        h, m, s = map(int, clock.split(":"))
        return datetime.datetime(int(year), MONTHS.index(month) + 1, int(day), h, m, s)
    day, month, year, clock = text.replace(",", "").split()
    h, m = map(int, clock.split(":"))
    return datetime.datetime(int(year), MONTH_NAMES.index(month) + 1, int(day), h, m)


def random_start(rng: random.Random) -> datetime.datetime:
    """A moment in 2023-2025, on a whole minute."""
    day = datetime.datetime(2023, 1, 1) + datetime.timedelta(days=rng.randrange(3 * 365))
    return day.replace(hour=rng.randrange(7, 11), minute=rng.randrange(60))


_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gl", "k", "l", "m", "n", "p", "pl", "qu", "r", "s", "st")
_ONSETS += ("t", "tr", "v", "z", "th", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "y")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "x", "nd", "st", "th")


def pseudo_word(rng: random.Random, syllables: int) -> str:
    """A pronounceable made-up word, lower case: words no corpus contains, so they cannot be recalled."""
    parts = [rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables)]
    return "".join(parts)


def pseudo_words(rng: random.Random, n: int, taken: set[str] | None = None) -> list[str]:
    taken = set() if taken is None else taken
    out: list[str] = []
    while len(out) < n:
        word = pseudo_word(rng, rng.randint(2, 3))
        if word not in taken and len(word) >= 5:
            taken.add(word)
            out.append(word)
    return out


def join_names(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
