"""The teacher's log move: a log seen in the head is parsed into entries in code; counts, existence and
neighbouring entries are computed in code, never read by llm().

`log_shape(sight)` says whether the look move's printout shows log entries (lines with a level word among
their first fields and an 8-hex request id) and, from the first of them, which whitespace field holds the
level, which the service (the field beside the level that is not the request id), and which timestamp
pattern of `WHEN` the line matches. `log_question(q)` reads what the question asks of such a log (a count of
a level, optionally after a time; whether any such entry exists; the request id of the entry after or before
a given one), or None. `parse_cell(rng, shape)` writes the first cell: every line with a request id and a word
in the level's field becomes an entry (the level's first four letters, service, request id, line), and it
prints the services it found, so that the second cell names a service the document really has (the
question's words are matched exactly against that list: ``billing-api`` is not ``billing-api-canary``).
`answer_cell(rng, shape, ask, services)` writes the second cell, which filters the entries, computes and
FINALs (a walk that finds no entry does not FINAL); None when no listed service fits the question.

It knows no generator: the level words, the request-id shape and the three timestamp patterns are what log
lines commonly hold, the fields are where the head's first entry has them, and the question's words choose
the operation. Its cells name only what the question or an earlier printout showed (the grounding check),
and comparisons use the question's own level word. This module only writes text.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from fathom.policies.looking import Question, Sight
from fathom.policies.moves import turn

LEVELS = frozenset({"error", "warn", "warning", "info", "debug"})  # a level field's words, in any case
RID = r"\b[0-9a-f]{8}\b"
# timestamp patterns -> the strptime format of what they match (a cell reads a time with the one pattern the
# head showed; a syslog time has no year, so the question's year is put in front of it)
WHEN = {
    "iso": (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d", "%Y-%m-%d %H:%M:%S"),
    "clf": (r"\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d", "%d/%b/%Y:%H:%M:%S"),
    "syslog": (r"[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d", "%Y %b %d %H:%M:%S"),
}
_CUTOFF = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)")
_NEGATIVE = re.compile(r"\b(not|never|no|none)\b")


def _field(token: str) -> str:
    """A whitespace field without brackets, colon, key (``level=``) or process id (``[4121]``), as the
    parse cell strips it."""
    return token.strip("[]<>:,").split("=")[-1].split("[")[0]


def _level_at(tokens: list[str]) -> int | None:
    return next((i for i, t in enumerate(tokens[:8]) if _field(t).lower() in LEVELS), None)


@dataclass(frozen=True)
class LogShape:
    level: int  # the whitespace field that holds an entry's level, as the head's first entry shows it
    service: int  # the field beside it that is not the request id
    when: str  # a key of WHEN, or "" where the first entry shows none of them


@dataclass(frozen=True)
class LogAsk:
    op: str  # count, count_after, exists, next, prev
    level: str = ""  # the question's level word as it writes it ("WARNING"); "" for next / prev
    names: tuple[str, ...] = ()  # the question's words that may name a service
    cutoff: tuple[int, ...] = ()  # (year, month, day, hour, minute, second) for count_after
    rid: str = ""  # the anchor entry's request id for next / prev
    options: tuple[str, str] = ("", "")  # exists: the answer when there is one, and when there is none


def log_shape(sight: Sight) -> LogShape | None:
    lines = [line for line in sight.head.splitlines()[:-1] if line.strip()]  # the head's last line is cut
    entries = [
        (line, level, rid)
        for line in lines
        if (level := _level_at(line.split())) is not None and (rid := re.search(RID, line))
    ]
    # a third: tracebacks and stack frames between entries are lines of their own
    if len(entries) < 3 or len(entries) < len(lines) / 3:
        return None
    first, level, rid = entries[0]
    fields = [_field(t) for t in first.split()]
    service = level + 1 if level + 1 < len(fields) and rid.group() not in fields[level + 1] else level - 1
    if service < 0:
        return None
    when = next((k for k, (pattern, _) in WHEN.items() if re.search(pattern, first)), "")
    return LogShape(level, service, when)


def log_question(q: Question) -> LogAsk | None:
    lower = q.text.lower()
    level = next((w for w in re.findall(r"[A-Za-z]+", q.text) if w.lower() in LEVELS), "")
    names = tuple(dict.fromkeys(w for w in re.findall(r"[a-z][\w-]*[a-z0-9]", lower) if w not in LEVELS))
    rid = re.findall(RID, q.text)
    if rid and re.search(r"request", lower):
        if re.search(r"\b(before|previous|preceding|precedes|preceded|earlier|last entry)\b", lower):
            return LogAsk("prev", names=names, rid=rid[0])
        if re.search(r"\b(after|next|following|follows|followed|later)\b", lower):
            return LogAsk("next", names=names, rid=rid[0])
        return None
    if not level or not re.search(r"\bentr(y|ies)\b|\blog", lower):
        return None
    if re.search(r"how many|count|number of", lower):
        cutoff = _CUTOFF.search(q.text)
        if cutoff and re.search(r"\b(after|later than)\b", lower):
            return LogAsk("count_after", level, names, tuple(int(x) for x in cutoff.groups()))
        return LogAsk("count", level, names)
    options = [o for o in q.quoted if o.strip()]
    if len(options) == 2:
        yes, no = sorted(options, key=lambda o: bool(_NEGATIVE.search(o.lower())))
        if not _NEGATIVE.search(yes.lower()) and _NEGATIVE.search(no.lower()):
            return LogAsk("exists", level, names, options=(yes, no))
    return None


def parse_cell(rng: random.Random, shape: LogShape) -> str:
    k, j = shape.level, shape.service
    code = f"""
import re
entries = []
for line in ctx.splitlines():
    f = [t.strip("[]<>:,").split("=")[-1].split("[")[0] for t in line.split()]
    rid = re.search(r"{RID}", line)
    if rid and len(f) > {max(k, j)} and f[{k}].isalpha():
        entries.append((f[{k}].lower()[:4], f[{j}], rid.group(), line))
print(len(entries), "entries; services:", sorted({{e[1] for e in entries}}))
print("levels:", sorted({{e[0] for e in entries}}))
"""
    return turn(
        rng,
        (
            f"A log: I parse its entries in code (level in field {k}, service in field {j}).",
            f"A log file; counting is for code. Level is field {k} of an entry, its service field {j}.",
            f"Log lines with a level and a request id: parse them (level field {k}, service {j}).",
        ),
        code,
    )


def parse_services(observation: str) -> list[str]:
    """The services the parse cell printed."""
    m = re.search(r"entries; services: (\[.*\])$", observation, re.M)
    return re.findall(r"'([^']*)'", m.group(1)) if m else []


def answer_cell(rng: random.Random, shape: LogShape, ask: LogAsk, services: list[str]) -> str | None:
    named = [n for n in ask.names if n in services]
    service = max(named, key=len) if named else ""  # billing-api-canary, not billing-api inside it
    if not service and ask.op not in ("next", "prev"):
        return None
    test = f"e[1] == {service!r}" if service else "True"
    if ask.op in ("count", "count_after", "exists"):
        test += f" and e[0] == {ask.level!r}.lower()[:4]"  # WARNING and Warn are one level
    when = ""
    if ask.op == "count_after":
        if not shape.when:
            return None
        pattern, fmt = WHEN[shape.when]  # an ISO time may have a T for its space; a syslog time has no year
        stamp = {"iso": 'stamp.replace("T", " ")', "syslog": f"{f'{ask.cutoff[0]} '!r} + stamp"}.get(
            shape.when, "stamp"
        )
        test += f" and when(e[3]) > {ask.cutoff[1:]!r}"
        when = f"""from datetime import datetime
def when(line):
    stamp = re.search(r"{pattern}", line).group()
    return datetime.strptime({stamp}, "{fmt}").timetuple()[1:6]
"""
    if ask.op == "exists":
        yes, no = ask.options
        compute = f"""picked = [e for e in entries if {test}]
print(len(picked), "entries match")
FINAL({yes!r} if picked else {no!r})"""
    elif ask.op in ("count", "count_after"):
        compute = f"""{when}picked = [e for e in entries if {test}]
print(len(picked), "entries match;", picked[:2])
FINAL(len(picked))"""
    else:
        step = "range(at[0] + 1, len(entries))" if ask.op == "next" else "range(at[0] - 1, -1, -1)"
        compute = f"""at = [i for i, e in enumerate(entries) if e[2] == {ask.rid!r}]
print(len(at), "entries with that request id")
found = [e for e in (entries[i] for i in {step}) if {test}] if at else []
print(found[:1])
if found:
    FINAL(found[0][2])"""
    return turn(
        rng,
        (
            "The entries are parsed; now the filter the question asks for, in code.",
            "With the entries in hand, I pick the ones the question describes and answer from them.",
            "Now compute the answer over the parsed entries: the service exactly as listed, the rest from the "
            "question.",
        ),
        compute,
    )
