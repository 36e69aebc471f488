"""Log files, previous/next: the request id of the entry after / before a given one (`logs_next`).

The documents are `fathom.tasks.logs` logs (layouts, timestamp styles, look-alike services, noise lines).
Kinds (five phrasings each, exact answers, 8-hex request ids): the next / previous entry of service S
after / before the entry with request id R (`next_same`, `prev_same`; the anchor is never adjacent to an
entry of S, and S has entries on both sides), or the entry right after / before it, any service
(`next_any`, `prev_any`; tracebacks, stack frames and heartbeats are not entries).

For an expert: `NEXT_KINDS` parse questions and `logs.parse_entries` reads the log. This module does not
write logs (see `fathom.tasks.logs`).
"""

from __future__ import annotations

import random

from fathom.tasks import formats
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora
from fathom.tasks.logs import (
    RID,
    SERVICE,
    Entry,
    doc_chars,
    draw_entries,
    draw_style,
    line_chars,
    parse_entries,
    services,
    timeline,
    write_log,
)
from fathom.tasks.schema import Task

_N = {"service": SERVICE, "rid": RID}
_ANY = " (tracebacks, stack frames and heartbeat lines are not entries)"
NEXT_KINDS = {
    "next_same": Phrasings(
        (
            "What is the request id of the first entry logged by {service} after the entry with request "
            "id {rid}? Answer with the 8-character id.",
            "After the entry whose request id is {rid}, which request id does the next entry of the service "
            "named exactly {service} carry? Give the id only.",
            "Find the entry with request id {rid}. What is the request id of the next entry from {service} "
            "that follows it? Answer with the id.",
            "Which request id belongs to the first {service} entry that comes later in the log than request "
            "{rid}? Reply with the id only.",
            "Request {rid} was logged at some point. Give the request id of the following entry written by "
            "the service {service}.",
        ),
        _N,
    ),
    "prev_same": Phrasings(
        (
            "What is the request id of the last entry logged by {service} before the entry with request "
            "id {rid}? Answer with the 8-character id.",
            "Before the entry whose request id is {rid}, which request id does the closest earlier entry of "
            "the service named exactly {service} carry? Give the id only.",
            "Find the entry with request id {rid}. What is the request id of the previous entry from "
            "{service} that precedes it? Answer with the id.",
            "Which request id belongs to the latest {service} entry that comes earlier in the log than "
            "request {rid}? Reply with the id only.",
            "Request {rid} was logged at some point. Give the request id of the preceding entry written by "
            "the service {service}.",
        ),
        _N,
    ),
    "next_any": Phrasings(
        tuple(
            t + _ANY
            for t in (
                "What is the request id of the entry right after the entry with request id {rid}?",
                "Which request id does the log entry immediately following request {rid} carry?",
                "Give the request id of the next log entry after the one with request id {rid}",
                "The entry with request id {rid} is followed by another entry. What is its request id?",
                "Name the request id of the very next entry after request {rid}",
            )
        ),
        {"rid": RID},
    ),
    "prev_any": Phrasings(
        tuple(
            t + _ANY
            for t in (
                "What is the request id of the entry right before the entry with request id {rid}?",
                "Which request id does the log entry immediately preceding request {rid} carry?",
                "Give the request id of the previous log entry before the one with request id {rid}",
                "The entry with request id {rid} is preceded by another entry. What is its request id?",
                "Name the request id of the entry just before request {rid}",
            )
        ),
        {"rid": RID},
    ),
}
NEXT_WEIGHTS = (0.35, 0.35, 0.15, 0.15)


def _next_answer(kind: str, entries: list[Entry], rid: str, service: str) -> str:
    at = find_one([i for i, e in enumerate(entries) if e.rid == rid], f"entry with request id {rid}")
    step = 1 if kind.startswith("next") else -1
    i = at + step
    while 0 <= i < len(entries):
        if kind.endswith("any") or entries[i].service == service:
            return entries[i].rid
        i += step
    raise InvalidTaskError(f"no {kind} entry for request {rid}")


def generate_next(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"logs_next/{seed}")
    kind = rng.choices(tuple(NEXT_KINDS), NEXT_WEIGHTS)[0]
    style = draw_style(rng, difficulty)
    names = services(rng, {"easy": 3, "medium": 4, "hard": 6}[difficulty])
    messages = formats.lines_from(corpora, "fortunes")
    n_chars = doc_chars(length_tokens, "logs_next", style)
    picks = draw_entries(rng, n_chars, line_chars(style, messages), names, None)
    entries = timeline(rng, picks)
    # An anchor with entries of the service on both sides, none of them adjacent to it.
    anchors: list[int] = []
    for service in rng.sample(names, len(names)):
        own = [i for i, e in enumerate(entries) if e.service == service]
        if len(own) < 2:
            continue
        anchors = [
            i
            for i in range(own[0] + 2, own[-1] - 1)
            if service not in (entries[i - 1].service, entries[i].service, entries[i + 1].service)
        ]
        if anchors:
            break
    if not anchors:
        raise InvalidTaskError(f"logs_next/{seed}: no anchor entry (document too short?)")
    rid = entries[rng.choice(anchors)].rid
    document = write_log(rng, entries, style, messages, 0.02)
    question = NEXT_KINDS[kind].write(rng, service=service, rid=rid)
    answer = _next_answer(kind, entries, rid, service)
    meta = {"kind": kind, "layout": style.layout, "timestamps": style.ts, "entries": len(entries)}
    return make_task("logs_next", seed, length_tokens, difficulty, question, answer, "exact", document, meta)


def solve_next(question: str, document: str) -> str:
    kind, slots = formats.parse_kind(NEXT_KINDS, question)
    return _next_answer(kind, parse_entries(document), slots["rid"], slots.get("service", ""))


def wrong_next(task: Task, document: str) -> list[str]:
    entries = parse_entries(document)
    kind, slots = formats.parse_kind(NEXT_KINDS, task.question)
    at = find_one([i for i, e in enumerate(entries) if e.rid == slots["rid"]], "anchor")
    near = {entries[at + d].rid for d in (-2, -1, 0, 1, 2)} - {task.answer}
    opposite = {"next_same": "prev_same", "prev_same": "next_same", "next_any": "prev_any"}
    other = _next_answer(opposite.get(kind, "next_any"), entries, slots["rid"], slots.get("service", ""))
    return [*sorted(near), other, ""]


FAMILY = Family(
    "logs_next",
    "application logs: the request id of the next / previous entry (of a service) around a given one",
    generate_next,
    solve_next,
    wrong_next,
    True,
)
