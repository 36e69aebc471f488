"""The teacher's JSON-records move: one JSON object a line, seen in the head, is parsed and filtered in code,
never read by llm().

`json_shape(sight)` says whether the look move's printout shows JSON Lines (at least three whole head lines
that parse as JSON objects, and a third of the head's lines) and which keys their records have, nested
objects flattened to dotted keys (``address.city``). `index_cell(rng, terms)` writes the first cell: every
line that parses as an object becomes a flat record (a line cut short is skipped), and for each of the
question's words it prints which keys hold it as a value, or that it is a key. `records_ask(q, shape, seen)`
reads that printout and the question into a `RecordsAsk`: the conditions (a word that is the value of one
key; a true/false key of the head's records that the question names, or names negated: "not active",
"inactive"), the key to report, and whether the question wants the record with the highest or lowest value
of a numeric key. `answer_cell(rng, ask)` writes the second cell, which filters, picks and FINALs; where the conditions pick not exactly one record for a plain lookup it prints
them and does not FINAL (the teacher searches on).

It knows no generator: the question's words are tested against the document's values in code, and the keys
it names are the ones the head's records show. Its cells name only what the question or an earlier
printout showed (the grounding check). This module only writes text.
"""

from __future__ import annotations

import ast
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from fathom.policies.looking import LEAST, MOST, STOP, Question, Sight
from fathom.policies.moves import turn

_TOKEN = re.compile(r"[\w@+]+(?:[.\-][\w@+]+)*")
# the question's function words, never a value worth looking up
_FUNCTION_WORDS = (
    "a all an any are as at be by do does exactly find for has how if in is it its look not of on one or "
    "record recorded reply report say so to up who whose was were will"
)
_FUNCTION = frozenset(_FUNCTION_WORDS.split())
_SEEN = re.compile(r"^(.+?) is (a value of|a key:) (.+)$")


@dataclass(frozen=True)
class JsonShape:
    keys: tuple[str, ...]  # flattened keys of the head's whole records, in first-seen order
    numeric: frozenset[str]  # keys whose values in those records are all integers
    booleans: frozenset[str] = frozenset()  # keys whose values in those records are all true / false


@dataclass(frozen=True)
class RecordsAsk:
    op: str  # value (a key of the one record the conditions pick), max or min (of `num`, reporting `report`)
    report: str
    equals: tuple[tuple[str, str], ...]  # (key, the question's word its value must print as)
    flags: tuple[tuple[str, bool], ...] = ()  # (key, the value it must hold): "active" True, "inactive" False
    num: str = ""


def flatten(obj: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A record with nested objects' keys joined by dots, as the cells flatten it."""
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def _records(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # the head's last line, cut by the printout
        if isinstance(obj, dict):
            out.append(flatten(obj))
    return out


def json_shape(sight: Sight) -> JsonShape | None:
    lines = [line for line in sight.head.splitlines() if line.strip()]
    records = _records(lines)
    if len(records) < 3 or len(records) < len(lines) / 3:
        return None
    keys = tuple(dict.fromkeys(k for r in records for k in r))
    numeric = frozenset(
        k
        for k in keys
        if all(isinstance(r[k], int) and not isinstance(r[k], bool) for r in records if r.get(k) is not None)
    )
    booleans = frozenset(
        k for k in keys if all(isinstance(r[k], bool) for r in records if r.get(k) is not None)
    )
    return JsonShape(keys, numeric, booleans)


def terms_of(q: Question) -> list[str]:
    """The question's words and tokens that may be values (an email, an id, a city, a plan), each once and
    without function words; a hyphenated word also by its parts ("team-plan")."""
    found = []
    for token in _TOKEN.findall(q.text):
        token = token.strip(".")
        found.append(token)
        if "-" in token and "@" not in token:
            found.extend(token.split("-"))
    return [t for t in dict.fromkeys(found) if t and t.lower() not in STOP | _FUNCTION]


def index_cell(rng: random.Random, terms: list[str]) -> str:
    code = f"""
import json
from collections import Counter
def flat(obj, pre=""):
    out = {{}}
    for k, v in obj.items():
        out.update(flat(v, pre + k + ".") if isinstance(v, dict) else {{pre + k: v}})
    return out
recs = []
for line in ctx.splitlines():
    if line.startswith("{{"):
        try:
            recs.append(flat(json.loads(line)))
        except json.JSONDecodeError:
            continue  # a line cut short holds no record
keys = {{k for r in recs for k in r}}
print(len(recs), "records; keys:", sorted(keys))
for term in {terms!r}:
    held = Counter(k for r in recs for k, v in r.items() if str(v) == term)
    if held:
        print(repr(term), "is a value of", dict(held))
    elif term in keys:
        print(repr(term), "is a key:", Counter(str(r[term]) for r in recs if term in r).most_common(3))
"""
    return turn(
        rng,
        (
            "JSON Lines: I parse every record and see which keys hold the question's words.",
            "One JSON object a line: parse them, then find which of the question's words are values.",
            "These are JSON records; I load them and look up the question's words among their values.",
        ),
        code,
    )


def parse_seen(observation: str) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """The index cell's printout: (word -> {key: records holding it}, key word -> {its commonest values:
    records})."""
    values: dict[str, dict[str, int]] = {}
    keys: dict[str, dict[str, int]] = {}
    for line in observation.splitlines():
        m = _SEEN.match(line)
        if m is None:
            continue
        try:
            term, counts = ast.literal_eval(m.group(1)), ast.literal_eval(m.group(3))
        except (ValueError, SyntaxError):
            continue
        (values if m.group(2) == "a value of" else keys)[term] = dict(counts)
    return values, keys


def _named(q: Question, shape: JsonShape) -> list[str]:
    """The keys the question names, in its order (a whole key: ``address.city``, ``score``)."""
    spots = []
    for k in shape.keys:
        m = re.search(rf"(?<![\w.]){re.escape(k)}(?![\w])", q.text)
        if m:
            spots.append((m.start(), k))
    return [k for _, k in sorted(spots)]


def _compared(text: str, at: int, shape: JsonShape, used: set[str]) -> str:
    """The numeric key named nearest to the superlative at `at` ("the top score", "who scores highest")."""
    spots = [
        (abs(m.start() - at), k)
        for k in shape.numeric
        if k not in used
        for m in re.finditer(rf"(?<![\w.]){re.escape(k)}s?(?![\w])", text)
    ]
    return min(spots)[1] if spots else ""


def records_ask(q: Question, shape: JsonShape, observation: str) -> RecordsAsk | None:
    values, _ = parse_seen(observation)
    named = _named(q, shape)
    equals = []
    for term, where in values.items():
        holders = [k for k in where if k in named] or list(where)
        if len(holders) == 1:  # a word several keys hold says nothing of which to filter
            equals.append((holders[0], term))
    lower = q.text.lower()
    flags = []
    for k in sorted(shape.booleans):  # a true/false key the question names, or names negated
        if re.search(rf"\b(?:not |non-?|in){re.escape(k.lower())}\b", lower):
            flags.append((k, False))
        elif re.search(rf"(?<![\w.]){re.escape(k)}\b", q.text):
            flags.append((k, True))
    if not equals and not flags:
        return None
    op = "max" if re.search(MOST, lower) else "min" if re.search(LEAST, lower) else "value"
    used = {k for k, _ in equals} | {k for k, _ in flags}
    num = ""
    if op != "value":
        num = _compared(q.text, re.search(MOST if op == "max" else LEAST, lower).start(), shape, used)
        if not num:
            return None
        used.add(num)
    report = next((k for k in named if k not in used), "")
    if (
        not report
        and op == "value"
        and named
        and len(re.findall(rf"(?<![\w.]){re.escape(named[0])}\b", q.text)) > 1
    ):
        report = named[0]  # "the email of the user whose email is ...": a key both filtered on and asked for
    if not report:
        return None
    return RecordsAsk(op, report, tuple(equals), tuple(flags), num)


def answer_cell(rng: random.Random, ask: RecordsAsk) -> str:
    # a value compared as it printed; no literal is followed by two closing brackets (a student mis-copies them)
    tests = [f"text(r, {k!r}) == {v!r}" for k, v in ask.equals] + [
        f"r.get({k!r}) is {v}" for k, v in ask.flags
    ]
    if ask.op == "value":
        pick = f"""if len(picked) == 1:
    answer = picked[0].get({ask.report!r})
    FINAL(answer)
for r in picked[:5]:
    print(r)"""
    else:
        best = "max" if ask.op == "max" else "min"
        pick = f"""scored = [r for r in picked if isinstance(r.get({ask.num!r}), int)]
best = {best}(scored, key=lambda r: r[{ask.num!r}]) if scored else None
ties = [r for r in scored if r[{ask.num!r}] == best[{ask.num!r}]] if best else []
print("{best}", {ask.num!r}, best and best[{ask.num!r}], "held by", len(ties), "record(s)")
if len(ties) == 1:
    answer = best.get({ask.report!r})
    FINAL(answer)"""
    code = f"""
def text(r, key):
    return str(r.get(key))
picked = [r for r in recs if {" and ".join(tests)}]
print(len(picked), "of", len(recs), "records pass")
{pick}
"""
    return turn(
        rng,
        (
            "Now I filter the records on those values and answer from the one that fits.",
            "The index says which key each word belongs to; I filter on them in code.",
            "With the keys known, the filter and the pick are a few lines of Python.",
        ),
        code,
    )
