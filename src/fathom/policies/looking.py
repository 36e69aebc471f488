"""What the teacher knows: the question's words, and what its own code printed. Nothing else.

`Question` reads the question text: its anchors (identifier-like tokens and quoted phrases: the things to
search for), the answer form it asks for (a number of N digits, a count, a list, pairs, a word) and small
facts it states ("among the 3,744 questions", "a story of 23 facts"). `Sight` parses what the look move
printed (length, head, sampled lines) into the document's shape: does it have ``Field: value`` records, with
which separator, which quoted category names does its head list.

These are the teacher's own reading of text it was shown; no task object, family name, gold answer or
generator constant is imported here (a test checks that this package's teacher modules import none).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# Identifier-like (dotted parts allowed): contains a digit, or is a hyphenated lowercase compound, or is ALL CAPS (with _).
IDENT = re.compile(
    r"(?<![\w.-])(?:(?=[\w.-]*\d)[\w-]+(?:\.[\w-]+)*(?<=[\w-]{4})|[a-z]+(?:-[a-z]+)+|[A-Z][A-Z0-9_]{2,})(?![\w-])"
)
# Quoted with '...', "...", curly quotes or backticks (commands and options are often in backticks).
QUOTED = re.compile(r"'([^']{2,80})'|\"([^\"]{2,80})\"|\u201c([^\u201d]{2,80})\u201d|`([^`]{2,80})`")
HEADING = re.compile(r"^([^\w\s]{1,4} ?)\S")
NAME = re.compile(r"(?<=[a-z,] )[A-Z][a-z]{2,}\b")  # a capitalised word inside a sentence
# A lowercase name joined by underscores (``sync_pine``, ``chunk_size``): a word search splits it apart.
SNAKE = re.compile(r"(?<![\w.@-])_?[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w@-])")
_STOP_WORDS = (
    "the and that this with from have what which where when into your there their about other they been "
    "more most less least same only each every list give answer number text above below provided"
)
STOP = frozenset(_STOP_WORDS.split())
# the words of a question that asks for the top or bottom value (a table's column, a record's key)
MOST = r"\b(most|highest|largest|greatest|maximum|max|top|biggest)\b"
LEAST = r"\b(least|lowest|smallest|minimum|min|bottom|fewest)\b"


@dataclass(frozen=True)
class Question:
    text: str
    anchors: tuple[str, ...]
    quoted: tuple[str, ...]
    names: tuple[str, ...]
    things: tuple[str, ...]  # "the football", "the kitchen": nouns the question points at
    digits: int | None  # "the 7-digit number"
    count: bool  # "how many"
    listing: bool  # "list every", "all ... separated by commas"
    pairs: bool
    stated_total: int | None  # "among the 3,744 questions", "a story of 23 facts"
    snake: tuple[str, ...] = ()  # "sync_pine": names in code or data, searched whole

    @property
    def searched(self) -> tuple[str, ...]:
        """The quoted phrases as search terms (`searchable`)."""
        return tuple(dict.fromkeys(searchable(p) for p in self.quoted))

    @property
    def words(self) -> list[str]:
        return [w for w in re.findall(r"[A-Za-z][a-z]{3,}", self.text) if w.lower() not in STOP]


def searchable(phrase: str) -> str:
    """`phrase` as the teacher searches for it: a phrase with a quote mark in it ("I've got them") by its
    longest part without one, whose hits include the phrase's lines. The student writes search terms as
    '...' literals, and an apostrophe inside one ends the string (run 11: a SyntaxError each time)."""
    parts = [p.strip() for p in re.split(r"['\"]", phrase)]
    longest = max(parts, key=len)
    return longest if len(parts) > 1 and len(longest) >= 8 else phrase


def read_question(text: str) -> Question:
    quoted = tuple(next(g for g in groups if g) for groups in QUOTED.findall(text))
    anchors = []
    for token in IDENT.findall(text):
        if token.replace(",", "").isdigit() and "," in token:
            continue
        if not re.fullmatch(r"\d+-digit", token) and token not in anchors:
            anchors.append(token)
    digits = re.search(r"(\d+)-digit", text)
    total = re.search(
        r"(?:among|of) the (\d[\d,]*) \w+|story of (\d+) facts|(\d[\d,]*) (?:rows|lines|records|entries)",
        text,
    )
    stated = next((int(g.replace(",", "")) for g in (total.groups() if total else ()) if g), None)
    lower = text.lower()
    return Question(
        text=text,
        anchors=tuple(anchors),
        quoted=quoted,
        names=tuple(dict.fromkeys(n for n in NAME.findall(text) if n.lower() not in STOP)),
        things=tuple(dict.fromkeys(re.findall(r"\bthe ([a-z]{3,})\b(?=[?.,]| before| after)", text))),
        digits=int(digits.group(1)) if digits else None,
        count="how many" in lower,
        listing=any(
            w in lower for w in ("list every", "list all", "all the", "separated by commas", "what are all")
        ),
        pairs="pairs of" in lower,
        stated_total=stated,
        snake=tuple(t for t in dict.fromkeys(SNAKE.findall(text)) if t not in anchors),
    )


@dataclass
class Sight:
    """The document as the look move printed it."""

    chars: int = 0
    lines: int = 0
    head: str = ""
    samples: list[str] = field(default_factory=list)

    @property
    def shown(self) -> list[str]:
        return [*self.head.splitlines(), *self.samples]

    def categories(self) -> list[str]:
        """Quoted names listed together in the head ("one of 6 categories: 'a', 'b', ...")."""
        runs = re.findall(r"((?:'[^']{2,40}'(?:, (?:and |or )?|\.| and | or )?){3,})", self.head)
        best = max(runs, key=len) if runs else ""
        return re.findall(r"'([^']{2,40})'", best)

    def heading_prefixes(self) -> tuple[str, ...]:
        """Prefixes of the head's heading-like lines: short lines that open with punctuation ("### ",
        "==> ", "[") and are not list items, table rows, quotes or comments in prose."""
        found: list[str] = []
        for line in self.head.splitlines():
            m = HEADING.match(line)
            if m is None or len(line) > 90 or len(re.findall(r"\w+", line)) > 8:
                continue
            prefix = m.group(1)
            if prefix.strip() in ("-", "*", "|", ">", "//", "--", "+", "...") or prefix in found:
                continue
            found.append(prefix)
        return tuple(found)

    def record_fields(self) -> tuple[list[str], str] | None:
        """(field names, separator) when most shown lines read ``Name: value<sep>Name: value...``."""
        shapes: Counter[tuple[tuple[str, ...], str]] = Counter()
        for line in self.shown:
            names = re.findall(r"(?:^|(?<=\s))([A-Z][A-Za-z_]*): ", line)
            if len(names) < 2 or not line.startswith(names[0] + ": "):
                continue
            after_first = line.index(names[0] + ": ") + len(names[0]) + 2
            second = line.find(" " + names[1] + ": ", after_first)
            if second < 0:
                continue
            value = line[after_first:second]
            sep = re.search(r"\s*[^\w\s]*\s*$", value + " ").group(0)  # type: ignore[union-attr]
            shapes[(tuple(names), sep.rstrip() + " " if sep.strip() else " ")] += 1
        if not shapes:
            return None
        (names, sep), n = shapes.most_common(1)[0]
        return (list(names), sep) if n >= 3 else None


def parse_look(observation: str) -> Sight:
    """Read the look move's printout: ``LEN <chars> <lines>``, ``HEAD``...``SAMPLES``, one sample a line."""
    sight = Sight()
    m = re.search(r"(\d+) chars, (\d+) lines", observation)
    if m:
        sight.chars, sight.lines = int(m.group(1)), int(m.group(2))
    head, _, rest = observation.partition("--- samples ---")
    sight.head = head.partition("--- head ---")[2].strip("\n")
    sight.samples = [re.sub(r"^\s*\d+: ", "", s) for s in rest.splitlines() if re.match(r"^\s*\d+: ", s)]
    return sight
