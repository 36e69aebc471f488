"""The teacher's mail move: a mailbox's messages are found by their headers in code, and a sender is looked up
in the staff directory by address, never read by llm().

After the search move, `mail_question(q, hits)` says whether the question asks about a thread whose quoted
subject the search found on ``Subject:`` lines, and what of it: who started it, who sent its first reply,
or everyone who replied, and whether it wants their manager, their full names or their addresses.
`thread_cell(rng, ask)` writes the first cell: every run of ``Name: value`` header lines is a message's
headers (``From``, ``Subject``...), and it prints, in the mailbox's order, the headers of each message of
the thread (its subject is the quoted one, or ends in ``: `` and the quoted one: ``Re:``, ``RE:``, ``Fwd:``).
`parse_thread` reads that back, and `senders(ask, thread)` picks the addresses the question is about.
`sender_cell(rng, ask, addresses)` writes the second cell: where the question asks for addresses it FINALs
the replies' From addresses; else it prints each sender's directory entry (the first line holding the
address that is not a header, with its neighbours, and the table's header row where the entry is a table
row). `answer_turn(rng, ask, observation)` reads the entries back (``reports to X``, ``manager: X``, a
``Manager`` column; the name likewise) and FINALs what they say, or returns None where an entry does not.

It knows no generator: header names, reply prefixes and directory words are what mailboxes commonly hold,
and the senders it looks up are those the first cell printed. This module only writes text.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass

from fathom.policies.looking import Question
from fathom.policies.moves import turn

ADDRESS = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"


@dataclass(frozen=True)
class MailAsk:
    title: str  # the thread's subject, as the question quotes it
    op: str  # starter, first_reply, repliers
    want: str  # manager, names, addresses


def mail_question(q: Question, hits: dict[str, tuple[int, list[str]]]) -> MailAsk | None:
    titles = [t for t in q.quoted if any(line.startswith("Subject:") for line in hits.get(t, (0, []))[1])]
    if not titles:
        return None
    lower = q.text.lower()
    if re.search(r"first (reply|answer|\"re:\")|earliest reply|replied first", lower):
        op = "first_reply"
    elif re.search(r"start|opened|original|not a reply", lower):
        op = "starter"
    elif re.search(r"repl|answered", lower):
        op = "repliers"
    else:
        return None
    if re.search(r"manager|manages|report to|direct report", lower):
        want = "manager"
    elif "address" in lower:
        want = "addresses"
    else:
        want = "names"
    if op == "repliers" and want == "manager":
        return None
    return MailAsk(max(titles, key=len), op, want)


def thread_cell(rng: random.Random, ask: MailAsk) -> str:
    code = f"""
import re
msgs, cur = [], {{}}
for line in ctx.splitlines():
    m = re.match(r"([A-Z][\\w-]*): (.*)", line)
    if m:
        cur[m.group(1)] = m.group(2)
    elif cur:
        msgs.append(cur)
        cur = {{}}
title = {ask.title!r}
thread = [m for m in msgs if m.get("Subject") == title or m.get("Subject", "").endswith(": " + title)]
print(len(msgs), "header blocks;", len(thread), "in the thread")
for m in thread:
    print(m)
"""
    return turn(
        rng,
        (
            "The hits are Subject: lines of e-mails. I parse every message's headers and list the thread in order.",
            "This is a mailbox: I collect each message's headers in code and print the thread's messages.",
            "E-mail headers: parse From/Date/Subject of every message, then keep the thread the question names.",
        ),
        code,
    )


def parse_thread(observation: str) -> list[dict[str, str]]:
    """The thread cell's printout: each message's headers, in the mailbox's order."""
    thread = []
    for line in observation.splitlines():
        if line.startswith("{'"):
            try:
                headers = ast.literal_eval(line)
            except (ValueError, SyntaxError):
                continue  # a line cut short by the printout
            if isinstance(headers, dict):
                thread.append(headers)
    return thread


def senders(ask: MailAsk, thread: list[dict[str, str]]) -> list[str]:
    """The addresses of the senders the question is about, in order, each once."""
    opened = [m.get("From", "") for m in thread if m.get("Subject") == ask.title]
    replies = [m.get("From", "") for m in thread if m.get("Subject") != ask.title]
    picked = opened[:1] if ask.op == "starter" else replies[:1] if ask.op == "first_reply" else replies
    found = [m.group(0) for s in picked if (m := re.search(ADDRESS, s))]
    return list(dict.fromkeys(found))


def sender_cell(rng: random.Random, ask: MailAsk, addresses: list[str]) -> str:
    if ask.want == "addresses":
        code = f"""
replies = [m for m in thread if m.get("Subject") != title]
found = sorted({{re.search(r"{ADDRESS}", m["From"]).group(0) for m in replies}})
print(found)
FINAL(found)
"""
        thoughts = ("The replies are the thread's messages with a prefix; their From addresses answer it.",)
    else:
        code = f"""
lines = ctx.splitlines()
table = [line for line in lines if line[:1] == "|"][:1]
for a in {addresses!r}:
    at = next(i for i, line in enumerate(lines) if a in line and not re.match(r"[A-Z][\\w-]*: ", line))
    print(a, "->", " / ".join((table if lines[at].startswith("|") else []) + lines[at - 1 : at + 3]))
"""
        thoughts = (
            "Now the directory: I print the entry that holds each sender's address.",
            "A name is surest in the staff directory; I look the address up there.",
        )
    return turn(rng, thoughts, code)


def entry(text: str, address: str) -> tuple[str, str]:
    """(name, manager) from one printed directory entry; "" where it does not say."""
    parts = [p.strip() for p in text.split(" / ")]
    line = next((p for p in parts if address in p), "")
    if line.startswith("|") and parts and parts[0].startswith("|"):
        header = [c.strip().lower() for c in parts[0].strip("|").split("|")]
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == len(header):
            col = {h: c for h, c in zip(header, cells, strict=True)}
            return col.get("name", ""), next((c for h, c in col.items() if "manager" in h), "")
    if m := re.match(rf"(.+?) <{re.escape(address)}>.*?(?:reports to (.+))?$", line):
        return m.group(1).strip().strip('"'), (m.group(2) or "").strip()
    name = next((p[5:].strip() for p in parts if p.startswith("name:")), "")
    manager = next((p[8:].strip() for p in parts if p.startswith("manager:")), "")
    return name, manager


def answer_turn(rng: random.Random, ask: MailAsk, observation: str) -> str | None:
    found = {}
    for line in observation.splitlines():
        address, sep, text = line.partition(" -> ")
        if sep and re.fullmatch(ADDRESS, address):
            found[address] = entry(text, address)
    if not found:
        return None
    if ask.want == "manager":
        manager = next(iter(found.values()))[1]
        if not manager or manager in ("—", "-"):
            return None
        return turn(rng, (f"The directory says they report to {manager}.",), f"FINAL({manager!r})")
    names = [name for name, _ in found.values()]
    if not all(names):
        return None
    return turn(rng, ("The directory gives each sender's full name.",), f"FINAL({sorted(names)!r})")
