"""The teacher's block moves: answers computed in code over the document's parts, with no `llm()` reading.

Two moves, each a plan read from the question and the search printout, and the cell that carries it out:

- `part_count_plan` / `part_count_cell`: the question names two or more parts of the document whose names
  the search found on heading lines (lines that open with a prefix the look printed), quotes one word and
  asks which part uses it most (or least) often. Each part runs from its heading to the next heading with
  that prefix; the word is counted in code as a whole word, in any case unless the question asks for an
  exact case. It FINALs the single part with the top count, and only when that count is above zero.
- `filter_plan` / `filter_cell`: the question asks for a list of names, and one of its terms is found as
  a setting (``term = value`` or ``term: value`` at the start of the shown lines). The question states the
  test (above / below / at least / at most a number, or set to a value). Blocks are the document's
  blank-line-separated paragraphs, named by their first line; a block is listed when one of its own
  setting lines passes the test. A commented-out line (``# term = ...``) does not start with the term, so
  it sets nothing; a value a block would take from elsewhere is not on its own lines. It FINALs the list
  only when it is not empty.

Every literal in the cells comes from the question (the part names, the word, the term, the value) or
from the look's printout (the heading prefix). This module only writes text; it runs nothing and does
not decide when a move is tried (`fathom.policies.teacher` does).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from fathom.policies.looking import Question, Sight
from fathom.policies.moves import turn

HEAD_CHARS = 100  # a heading line is shorter than this
_EDGE = "\"'`,.?;:!()"
_MOST = r"\b(?:most|more often|more times|the highest count)\b"
_LEAST = r"\b(?:least|fewest|less often|fewer times|the lowest count)\b"
_ABOVE = r"(?:strictly )?(?:greater|more|higher|larger|bigger) than|\babove|\bover|\bexceeds?|\bexceeding"
_SETTING = re.compile(r"^\s*([A-Za-z][\w.-]*)\s*[=:]\s*\S")
_TESTS = (
    (r"\bat least", ">="),
    (r"\bat most|\bno more than", "<="),
    (_ABOVE, ">"),
    (r"(?:less|lower|smaller|fewer) than|\bbelow|\bunder", "<"),
)


@dataclass(frozen=True)
class PartCount:
    parts: tuple[str, ...]  # the part names as the question writes them
    word: str
    prefixes: tuple[str, ...]  # heading prefixes the parts' heading lines open with
    pick: str  # "max" or "min"
    ignore_case: bool


@dataclass(frozen=True)
class Filter:
    term: str  # the setting's name as the question writes it
    op: str  # ">", ">=", "<", "<=", "=="
    value: str


def _question_tokens(q: Question) -> list[str]:
    return [t.strip(_EDGE) for t in q.text.split() if t.strip(_EDGE)]


def part_count_plan(q: Question, sight: Sight, hits: dict[str, tuple[int, list[str]]]) -> PartCount | None:
    """A per-part count when the question names parts found on heading lines, quotes a word and asks
    which part has it most or least often; None otherwise."""
    lower = q.text.lower()
    pick = "max" if re.search(_MOST, lower) else "min" if re.search(_LEAST, lower) else ""
    words = [w for w in q.quoted if re.fullmatch(r"[A-Za-z]+", w)]
    prefixes = sight.heading_prefixes()
    if not pick or len(words) != 1 or not prefixes:
        return None
    parts: list[str] = []
    shared = set(prefixes)
    for anchor in q.anchors:
        n, shown = hits.get(anchor, (0, []))
        heads = [line for line in shown if len(line) < HEAD_CHARS and line.startswith(prefixes)]
        if not 0 < n <= 2 or not heads:
            continue
        name = next((t for t in _question_tokens(q) if anchor in t and all(t in h for h in heads)), anchor)
        if name not in parts:
            parts.append(name)
            shared &= {p for p in prefixes if any(h.startswith(p) for h in heads)}
    if len(parts) < 2 or not shared:
        return None
    exact = re.search(r"case-sensitive|exact case|match(?:ing)? case", lower) is not None
    return PartCount(tuple(parts), words[0], tuple(p for p in prefixes if p in shared), pick, not exact)


def part_count_cell(rng: random.Random, p: PartCount) -> str:
    flags = ", re.I" if p.ignore_case else ""
    code = f"""
import re
lines = ctx.splitlines()
parts = {list(p.parts)!r}
word = re.compile(r"(?<![A-Za-z])" + re.escape({p.word!r}) + r"(?![A-Za-z])"{flags})
prefixes = {p.prefixes!r}
heads = [i for i, line in enumerate(lines) if line.startswith(prefixes) and len(line) < {HEAD_CHARS}]
ends = dict(zip(heads, [*heads[1:], len(lines)]))
counts = {{}}
for part in parts:
    spans = [(i + 1, ends[i]) for i in heads if part in lines[i]]
    counts[part] = sum(len(word.findall(line)) for a, b in spans for line in lines[a:b])
print(counts)
best = {p.pick}(counts.values())
top = [part for part, n in counts.items() if n == best]
if best > 0 and len(top) == 1:
    FINAL(top[0])
"""
    return turn(
        rng,
        (
            "The parts the question names are headed sections; counting a word is a job for code, per section.",
            "Each named file starts at its heading line: I count the word in each part in code and compare.",
            "No reading needed: split the document at its headings and count the word in each named part.",
        ),
        code,
    )


def _test(q: Question, term: str) -> tuple[str, str] | None:
    after = q.text[q.text.find(term) + len(term) :]
    for pattern, op in _TESTS:
        m = re.search(rf"(?:{pattern})\s+(-?\d[\d,]*)", after)
        if m:
            return op, m.group(1).replace(",", "")
    m = re.search(r"^(?:\s+\w+){0,2}?\s*(?:=|\bto\b|\bis\b|\bequals?\b)\s*['\"`]?([^\s'\"`?,;]+)", after)
    return ("==", m.group(1).rstrip(".")) if m else None


def filter_plan(q: Question, hits: dict[str, tuple[int, list[str]]]) -> Filter | None:
    """A block filter when the question asks for names and one of its terms is a setting in the shown
    lines; None otherwise."""
    lower = q.text.lower()
    wants_names = q.listing or re.search(
        r"\blist\b|\bname (?:every|all|them)|\bnames of\b|one per line", lower
    )
    if not wants_names:
        return None
    tokens = set(_question_tokens(q))
    # A setting's name may be found only inside a search word's hits ('Retries' shows ``maxRetries = 6``).
    seen = [m.group(1) for _, shown in hits.values() for line in shown if (m := _SETTING.match(line))]
    for term in dict.fromkeys([*q.searched, *q.anchors, *(t for t in seen if t in tokens)]):
        shown = [line for _, lines in hits.values() for line in lines if term in line]
        setting = re.compile(r"^\s*" + re.escape(term) + r"\s*[=:]\s*\S")
        if sum(bool(setting.match(line)) for line in shown) * 2 < max(len(shown), 3):
            continue
        test = _test(q, term)
        if test:
            return Filter(term, *test)
    return None


def filter_cell(rng: random.Random, f: Filter) -> str:
    if f.op == "==":
        check = f"value == {f.value!r}"
    else:
        check = f'value.lstrip("-").isdigit() and int(value) {f.op} {f.value}'
    code = f"""
import re
lines = ctx.splitlines()
setting = re.compile(r"^\\s*" + re.escape({f.term!r}) + r"\\s*[=:]\\s*(.*?)\\s*$")
found, title = [], None
for line in lines:
    if not line.strip():
        title = None  # a blank line ends a block
        continue
    if title is None:
        title = line.strip().strip("[]:")  # a block is named by its first line
    m = setting.match(line)
    if m:
        value = m.group(1).strip("\\"'")
        if {check}:
            found.append(title)
found = sorted(set(found))
print(len(found), "blocks pass:", found[:12])
if found:
    FINAL(found)
"""
    return turn(
        rng,
        (
            "The term is a setting written at the start of its lines; I test each block's own settings in code.",
            "Each block sets the term on its own line: parse the value per block and keep the blocks that pass.",
            "A commented-out line does not start with the setting, and inherited values are not on the block's "
            "own lines: filtering the setting lines per block in code answers this.",
        ),
        code,
    )
