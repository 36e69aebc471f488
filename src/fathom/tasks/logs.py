"""Application log files, and the `logs_count` family over them (count / existence under a condition).

A document is one service mesh's log: entries in time order, one per line, each with a timestamp, a level,
a service, an 8-hex request id and a message (a line of the fortunes corpus). Per document the seed picks
one of four line layouts (`LAYOUTS`), one of four timestamp styles (`formats.TIMESTAMPS`), the level
spelling (upper / lower / title case, WARN or WARNING) and how much noise there is: Python tracebacks and
Java stack frames after some entries, ``-- MARK --`` heartbeats and blank lines, which are not entries::

    2024-03-05T14:22:01.123Z [ERROR] billing-api: Life is a bowl of cherries. request_id=3fa9c2e1
    2024-03-05 14:22:01,123 warn  [auth-svc] 3fa9c2e1 - Never trust a computer you cannot lift.
    Mar  5 14:22:01 node-07 ledger-worker[4121]: <info> [rid:3fa9c2e1] Ask again later.
    time="05/Mar/2024:14:22:01 +0000" level=Debug service=search rid=3fa9c2e1 msg="All is well."

Services come in look-alike groups (``billing-api``, ``billing-api-canary``, ``billing-worker``), so a
plain substring search for the asked service over-counts, and messages of other services often name the
asked service and level words ("retrying billing-api after ERROR"), so grepping for the level does too.

``logs_count`` kinds: count (entries of service S at level L; numeric), count_after (the same, after a
second-resolution cutoff that no entry falls in; numeric; S at L is 2% to 75% of the entries), exists
(did S log any L entry; "logged" / "never logged", exact).
Five phrasings per kind. The previous/next family over the same logs is `fathom.tasks.logs_next`.

For an expert: `parse_entries(document)` gives (seconds, level, service, rid) per entry (it detects the
layout); `COUNT_KINDS` parse questions. This module does not
write non-log shapes (see the other structured families).
"""

from __future__ import annotations

import datetime
import random
import re
from typing import NamedTuple

from fathom.tasks import formats
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Task

STEMS = (
    "auth",
    "billing",
    "search",
    "checkout",
    "inventory",
    "gateway",
    "payments",
    "notifier",
    "scheduler",
    "ingest",
    "reports",
    "profile",
    "ledger",
    "catalog",
    "mailer",
    "session",
    "pricing",
    "storage",
)
SUFFIXES = ("-api", "-svc", "-worker", "")
LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")
LEVEL_WEIGHTS = (0.25, 0.5, 0.15, 0.1)
RID = r"[0-9a-f]{8}"
SERVICE = r"[a-z][a-z0-9-]*"

# layout -> (line template, regex template); {ts} is the timestamp regex of the document's style.
LAYOUTS = {
    "bracket": (
        "{ts} [{level}] {service}: {msg} request_id={rid}",
        r"^(?P<ts>{ts}) \[(?P<level>[A-Za-z]+)\] (?P<service>{svc}): .* request_id=(?P<rid>{rid})$",
    ),
    "padded": (
        "{ts} {level:<7} [{service}] {rid} - {msg}",
        r"^(?P<ts>{ts}) (?P<level>[A-Za-z]+) +\[(?P<service>{svc})\] (?P<rid>{rid}) - ",
    ),
    "syslog": (
        "{ts} node-{host:02d} {service}[{pid}]: <{level}> [rid:{rid}] {msg}",
        r"^(?P<ts>{ts}) node-\d\d (?P<service>{svc})\[\d+\]: <(?P<level>[A-Za-z]+)> \[rid:(?P<rid>{rid})\] ",
    ),
    "logfmt": (
        'time="{ts}" level={level} service={service} rid={rid} msg="{msg}"',
        r'^time="(?P<ts>{ts})" level=(?P<level>[A-Za-z]+) service=(?P<service>{svc}) rid=(?P<rid>{rid}) ',
    ),
}
# Chars per token differ by layout and timestamp style (measured with the Qwen2.5 tokenizer): added to
# formats.RATES[family] when sizing a document.
RATE_SHIFT = {"bracket": 0.0, "logfmt": 0.1, "padded": -0.04, "syslog": -0.17, "syslog-ts": 0.39}
TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/srv/app/handlers.py", line {n}, in handle',
    "    result = dispatch(request)",
    "ConnectionError: upstream closed the connection",
)
JAVA = ("java.lang.IllegalStateException: pool exhausted", "\tat org.app.Pool.take(Pool.java:{n})")
# Messages of other services that name the asked service and a level word: traps for grep.
MENTIONS = (
    "retrying {service} after {level} response",
    "{service} reported {level} upstream, ignoring",
    "health check of {service} ok (last {level} cleared)",
)


class Entry(NamedTuple):
    ms: int  # milliseconds since formats.EPOCH, strictly increasing through a log
    level: str  # canonical, one of LEVELS
    service: str
    rid: str

    @property
    def second(self) -> int:
        return self.ms // 1000


def services(rng: random.Random, n_groups: int) -> list[str]:
    """Look-alike groups: each stem with two or three suffixes, one maybe a canary."""
    out: list[str] = []
    for stem in rng.sample(STEMS, n_groups):
        for suffix in rng.sample(SUFFIXES, rng.randint(2, 3)):
            out.append(stem + suffix)
        if rng.random() < 0.5:
            out.append(f"{stem}{rng.choice(SUFFIXES)}-canary")
    return sorted(set(out))


class Style(NamedTuple):
    layout: str
    ts: str
    case: str  # upper | lower | title
    warning: bool  # WARN written as WARNING
    noise: float  # chance of noise after an entry


def draw_style(rng: random.Random, difficulty: str) -> Style:
    noise = {"easy": 0.01, "medium": 0.04, "hard": 0.08}[difficulty]
    return Style(
        rng.choice(tuple(LAYOUTS)),
        rng.choice(tuple(formats.TIMESTAMPS)),
        rng.choice(("upper", "lower", "title")),
        rng.random() < 0.5,
        noise,
    )


def level_word(level: str, style: Style) -> str:
    word = "WARNING" if level == "WARN" and style.warning else level
    return {"upper": word, "lower": word.lower(), "title": word.title()}[style.case]


def write_log(
    rng: random.Random, entries: list[Entry], style: Style, messages: tuple[str, ...], mention: float
) -> str:
    template = LAYOUTS[style.layout][0]
    stamp = formats.TIMESTAMPS[style.ts][0]
    names = sorted({e.service for e in entries})
    out: list[str] = []
    for e in entries:
        if rng.random() < mention:
            msg = rng.choice(MENTIONS).format(service=rng.choice(names), level=rng.choice(LEVELS))
        else:
            msg = rng.choice(messages)
        t = formats.EPOCH + datetime.timedelta(milliseconds=e.ms)
        out.append(
            template.format(
                ts=stamp(t),
                level=level_word(e.level, style),
                service=e.service,
                rid=e.rid,
                msg=msg,
                host=rng.randrange(1, 40),
                pid=rng.randrange(100, 32_000),
            )
        )
        if rng.random() < style.noise:
            kind = rng.random()
            if kind < 0.5:
                out += [line.format(n=rng.randrange(10, 900)) for line in TRACEBACK]
            elif kind < 0.8:
                out += [line.format(n=rng.randrange(10, 900)) for line in JAVA]
            else:
                out.append(rng.choice(("-- MARK --", "")))
    return "\n".join(out) + "\n"


def _line_res() -> list[re.Pattern[str]]:
    return [
        re.compile(rx.format(ts=ts_rx, svc=SERVICE, rid=RID), re.MULTILINE)
        for _, rx in LAYOUTS.values()
        for _, ts_rx in formats.TIMESTAMPS.values()
    ]


LINE_RES = _line_res()
_CANON = {"WARNING": "WARN"}


def _seconds(text: str) -> int:
    """Whole seconds since formats.EPOCH of a timestamp in any style (syslog has no year: 2024)."""
    try:
        if text[4:5] == "-":  # iso, space, and the questions' cutoffs: 2024-03-05?14:22:01
            y, mo, d, rest = int(text[:4]), int(text[5:7]), int(text[8:10]), text[11:19]
        elif text[2:3] == "/":  # clf: 05/Mar/2024:14:22:01 +0000
            y, mo, d, rest = int(text[7:11]), formats.MONTHS.index(text[3:6]) + 1, int(text[:2]), text[12:20]
        else:  # syslog: Mar  5 14:22:01
            y, mo, d, rest = 2024, formats.MONTHS.index(text[:3]) + 1, int(text[4:6]), text[7:15]
        h, mi, s = (int(x) for x in rest.split(":"))
        day = (datetime.date(y, mo, d) - formats.EPOCH.date()).days
    except ValueError:
        raise InvalidTaskError(f"unreadable timestamp {text!r}") from None
    return day * 86_400 + h * 3600 + mi * 60 + s


def parse_entries(document: str) -> list[Entry]:
    """Every entry of a log (noise lines skipped), with its layout detected from the first lines."""
    head = "\n".join(document.split("\n", 60)[:60])
    pattern = max(LINE_RES, key=lambda p: len(p.findall(head)))
    out = []
    for m in pattern.finditer(document):
        level = m["level"].upper()
        out.append(Entry(1000 * _seconds(m["ts"]), _CANON.get(level, level), m["service"], m["rid"]))
    if not out:
        raise InvalidTaskError("no log entry found")
    return out


def doc_chars(length_tokens: int, family: str, style: Style) -> int:
    rate = (
        formats.RATES[family]
        + RATE_SHIFT[style.layout]
        + (RATE_SHIFT["syslog-ts"] if style.ts == "syslog" else 0)
    )
    return round(length_tokens * rate)


def line_chars(style: Style, messages: tuple[str, ...]) -> float:
    """The mean rendered length of an entry of this style, noise included (to size documents)."""
    stamp = formats.TIMESTAMPS[style.ts][0]
    bare = LAYOUTS[style.layout][0].format(
        ts=stamp(formats.EPOCH), level="INFO", service="billing-api", rid="0" * 8, msg="", host=1, pid=1000
    )
    mean_msg = sum(len(m) for m in messages[::50]) / len(messages[::50])
    return len(bare) + 1 + mean_msg + style.noise * 110


def draw_entries(
    rng: random.Random, n_chars: int, per_line: float, names: list[str], avoid: tuple[str, str] | None
) -> list[tuple[str, str]]:
    """(level, service) of about `n_chars / per_line` background entries (at least 40), never `avoid`."""
    picks: list[tuple[str, str]] = []
    while len(picks) < max(40, round(n_chars / per_line)):
        pick = (rng.choices(LEVELS, LEVEL_WEIGHTS)[0], rng.choice(names))
        if pick != avoid:
            picks.append(pick)
    return picks


def timeline(rng: random.Random, picks: list[tuple[str, str]]) -> list[Entry]:
    ms = rng.randrange(300 * 86_400_000)
    rids = formats.distinct(rng, lambda: formats.hex_id(rng), len(picks))
    out = []
    for (level, service), rid in zip(picks, rids, strict=True):
        ms += 1 + int(rng.expovariate(1 / 1200))
        out.append(Entry(ms, level, service, rid))
    return out


# ---- logs_count -----------------------------------------------------------------------------------
# Existence is answered with words of this family only, so no other family's "yes" / "no" gold fits.
EXISTS_ANSWERS = ("logged", "never logged")
_LOGGED = " Answer 'logged' or 'never logged'."
_S = {"service": SERVICE, "level": r"[A-Z]+", "cutoff": r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"}
COUNT_KINDS = {
    "count": Phrasings(
        (
            "How many {level} entries did the service {service} write to this log? Answer with a number.",
            "Count the log entries at level {level} from the service named exactly {service}. Give the count.",
            "In the log above, how many entries of the service {service} have the level {level}? "
            "Reply with one number.",
            "What is the number of {level}-level log entries emitted by {service}? Answer with a number.",
            "Service {service}: how many of its log entries are {level}? Just the number, please.",
        ),
        _S,
    ),
    "count_after": Phrasings(
        (
            "How many {level} entries did the service {service} log after {cutoff}? Answer with a number.",
            "Count the entries at level {level} from the service named exactly {service} with a timestamp "
            "later than {cutoff}. Give the count.",
            "After {cutoff}, how many log entries of {service} have the level {level}? Reply with one number.",
            "What is the number of {level}-level entries that {service} emitted after {cutoff}? "
            "Answer with a number.",
            "Service {service}, entries later than {cutoff}: how many are {level}? Just the number, please.",
        ),
        _S,
    ),
    "exists": Phrasings(
        (
            "Did the service {service} log any {level} entry?" + _LOGGED,
            "Is there at least one log entry at level {level} from the service named exactly {service}?"
            + _LOGGED,
            "Does {service} ever emit a {level}-level entry in this log?" + _LOGGED,
            "The log may contain an entry of level {level} written by {service}." + _LOGGED,
            "Has the service {service} written a {level} entry anywhere in the log above?" + _LOGGED,
        ),
        _S,
    ),
}
COUNT_WEIGHTS = (0.5, 0.4, 0.1)  # yes/no is a coin flip for a blind policy: keep it rare


def _cutoff_text(second: int) -> str:
    return (formats.EPOCH + datetime.timedelta(seconds=second)).strftime("%Y-%m-%d %H:%M:%S")


def generate_count(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"logs_count/{seed}")
    kind = rng.choices(tuple(COUNT_KINDS), COUNT_WEIGHTS)[0]
    style = draw_style(rng, difficulty)
    names = services(rng, {"easy": 3, "medium": 4, "hard": 6}[difficulty])
    service, level = rng.choice(names), rng.choice(("DEBUG", "WARN", "ERROR"))
    messages = formats.lines_from(corpora, "fortunes")
    n_chars = doc_chars(length_tokens, "logs_count", style)
    picks = draw_entries(rng, n_chars, line_chars(style, messages), names, (level, service))
    # The asked (service, level) takes a share of the log drawn uniformly from 2% to 75%: a count is
    # anywhere from a handful to hundreds, so a blind guess near the typical count rarely comes close.
    # Planted entries replace background ones, so the log keeps its target length.
    share = 0.0 if kind == "exists" and rng.random() < 0.5 else rng.uniform(0.02, 0.75)
    for i in rng.sample(range(len(picks)), max(1, round(share * len(picks))) if share else 0):
        picks[i] = (level, service)
    entries = timeline(rng, picks)
    cutoff = entries[rng.randrange(len(entries) // 5, len(entries) // 2)].second
    while any(e.second == cutoff for e in entries):
        cutoff += 1
    document = write_log(
        rng, entries, style, messages, {"easy": 0.0, "medium": 0.03, "hard": 0.08}[difficulty]
    )
    word = level_word(level, style).upper()
    question = COUNT_KINDS[kind].write(rng, service=service, level=word, cutoff=_cutoff_text(cutoff))
    answer = _count_answer(kind, entries, service, level, cutoff)
    metric = "exact" if kind == "exists" else "numeric"
    meta = {"kind": kind, "layout": style.layout, "timestamps": style.ts, "entries": len(entries)}
    return make_task("logs_count", seed, length_tokens, difficulty, question, answer, metric, document, meta)


def _count_answer(kind: str, entries: list[Entry], service: str, level: str, cutoff: int) -> str | int:
    hits = [e for e in entries if e.service == service and e.level == level]
    if kind == "count":
        return len(hits)
    if kind == "count_after":
        return sum(1 for e in hits if e.second > cutoff)
    return EXISTS_ANSWERS[0] if hits else EXISTS_ANSWERS[1]


def solve_count(question: str, document: str) -> str | int:
    kind, slots = formats.parse_kind(COUNT_KINDS, question)
    level = _CANON.get(slots["level"], slots["level"])
    cutoff = _seconds(slots["cutoff"]) if "cutoff" in slots else 0
    return _count_answer(kind, parse_entries(document), slots["service"], level, cutoff)


def wrong_count(task: Task, document: str) -> list[str | int]:
    if task.metric == "exact":
        return [*(a for a in EXISTS_ANSWERS if a != task.answer), "yes", "no", ""]
    gold = int(task.answer)  # type: ignore[arg-type]
    return [gold + 1, gold - 1, gold + 4, 2 * gold + 1, "many"]


FAMILY = Family(
    "logs_count",
    "application logs: count / existence of one service's entries at a level",
    generate_count,
    solve_count,
    wrong_count,
    True,
)
