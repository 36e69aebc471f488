"""E-mail threads with a staff directory: the sender's manager (`email_manager`, a multi-hop join) and
everyone who replied in a thread (`email_repliers`, a set).

A document is a mailbox export: a staff directory (at the top or the bottom; a pipe table with its
columns in random order, one "Name <address> — team; reports to Manager" line per person, or one
"key: value" block per person), and messages, each opened by a separator line with its number
(`SEPARATORS`), then headers in a random order (From, To, Date, Subject), a blank line, the body (prose
paragraphs, often a quoted line of the previous message of the thread, "On DATE, NAME wrote:") and a
signature. From headers come in `FROM_STYLES`; one of them is the bare address, so a name may only be
known through the directory. Replies carry "Re: ", "RE: " or "Re[2]: " before the thread's subject.
At medium/hard some threads have a twin whose subject is the same plus " (follow-up)".

email_manager asks who manages the person who started a thread (the one message whose subject is the
thread's subject with no reply prefix) or who sent its first reply: look the sender up in the directory
by address, then that person's manager. email_repliers asks for everyone (full names, or addresses)
who sent a reply in a thread. Gold: a full name (``exact``) / a sorted list (``set_f1``).

For an expert: `parse_mailbox(document)` gives the directory (address -> (name, manager)) and the
messages (from address, subject, date) in order; `thread_of(subject)` strips reply prefixes.
Difficulty: easy 10 people, medium 20 (+ twins), hard 40 (+ twins).

This module does not write chat logs (see `fathom.tasks.chat`).
"""

from __future__ import annotations

import datetime
import random
import re
from typing import NamedTuple

from fathom.tasks import prose
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.haystack import Corpora
from fathom.tasks.prose import Budget, Person, Phrasings, Snippets
from fathom.tasks.schema import Task
from fathom.tasks.words import ADJECTIVES, NOUNS

SEPARATORS = ("===== Message {n} =====", "----- Original message #{n} -----", "[mail {n}]")
SEPARATOR_RE = re.compile(
    r"^(?:===== Message \d+ =====|----- Original message #\d+ -----|\[mail \d+\])$", re.M
)
FROM_STYLES = ("angle", "last_first", "paren", "bare")
REPLY_PREFIXES = ("Re: ", "RE: ", "Re[2]: ")
REPLY_RE = re.compile(r"^(?:(?:re|re\[\d+\]):\s*)+", re.IGNORECASE)
TOPICS = (
    "Budget review", "Offsite planning", "Migration plan", "Incident follow-up", "Hiring plan", "Q3 roadmap",
    "Vendor contract", "Release checklist", "Design review", "Security audit", "Onboarding notes",
    "Travel approval", "Capacity forecast", "Customer escalation", "Training schedule",
)  # fmt: skip
TEAMS = ("Platform", "Finance", "Research", "Sales", "Support", "Legal", "Design", "Operations")
# difficulty -> (people, twin threads with a " (follow-up)" subject)
LEVELS = {"easy": (10, False), "medium": (20, True), "hard": (40, True)}
SUBJECT = r"[A-Za-z0-9 ()-]+"


class Message(NamedTuple):
    sender: str  # address
    subject: str
    thread: str


def thread_of(subject: str) -> str:
    return REPLY_RE.sub("", subject)


def from_header(person: Person, address: str, style: str) -> str:
    return {
        "angle": f"{person.full} <{address}>",
        "last_first": f'"{person.last}, {person.first}" <{address}>',
        "paren": f"{address} ({person.full})",
        "bare": address,
    }[style]


def directory(
    rng: random.Random, staff: list[Person], addresses: list[str], managers: list[int | None]
) -> str:
    teams = {}
    for i, boss in enumerate(managers):
        teams[i] = rng.choice(TEAMS) if boss is None else teams[boss]
    boss_name = [staff[b].full if b is not None else "—" for b in managers]
    style = rng.choice(("table", "lines", "blocks"))
    title = rng.choice(("Staff directory", "## Directory", "PEOPLE (name, address, team, manager)"))
    order = list(range(len(staff)))
    rng.shuffle(order)
    if style == "table":
        cols = ["Name", "E-mail", "Team", "Manager"]
        rng.shuffle(cols)
        cell = {"Name": lambda i: staff[i].full, "E-mail": lambda i: addresses[i]}
        cell |= {"Team": lambda i: teams[i], "Manager": lambda i: boss_name[i]}
        rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        rows += ["| " + " | ".join(cell[c](i) for c in cols) + " |" for i in order]
        return title + "\n\n" + "\n".join(rows)
    if style == "lines":
        rows = [
            f"{staff[i].full} <{addresses[i]}> — {teams[i]}; "
            + (f"reports to {boss_name[i]}" if managers[i] is not None else f"head of {teams[i]}")
            for i in order
        ]
        return title + "\n\n" + "\n".join(rows)
    blocks = [
        f"name: {staff[i].full}\nemail: {addresses[i]}\nteam: {teams[i]}\nmanager: {boss_name[i]}"
        for i in order
    ]
    return title + "\n\n" + "\n\n".join(blocks)


def build(rng: random.Random, corpora: Corpora, length_tokens: int, difficulty: str) -> tuple[str, dict]:
    """The mailbox text and what questions need: people, managers, messages, threads."""
    n_people, twins = LEVELS[difficulty]
    n_people = min(n_people, max(6, length_tokens // 300))  # a short mailbox is not all directory
    staff = prose.people(rng, n_people)
    domain = f"{rng.choice(NOUNS)}{rng.choice(('corp', 'labs', 'works'))}.example"
    addr_style = rng.choice(prose.EMAIL_STYLES)
    addresses = [prose.email_address(p, addr_style, domain) for p in staff]
    heads = max(2, n_people // 8)
    managers: list[int | None] = [None if i < heads else rng.randrange(i) for i in range(n_people)]
    source = prose.prose_source(rng, corpora, int(length_tokens * 3.4))
    budget = Budget(source)
    snippets = Snippets(corpora, rng, source, int(length_tokens * 3.4) + 4000)
    directory_text = budget.struct(directory(rng, staff, addresses, managers), prose.WORDY_CHARS_PER_TOKEN)
    sep = rng.choice(SEPARATORS)
    styles = rng.sample(FROM_STYLES, 2)
    time_style = rng.choice(prose.TIME_STYLES)
    fields = ["From", "To", "Date", "Subject"]
    rng.shuffle(fields)
    t = prose.random_start(rng)
    used: set[str] = set()
    active: list[dict] = []
    messages: list[Message] = []
    parts: list[str] = []
    while budget.tokens < length_tokens - 200 or len(messages) < 2:
        if not active or (len(messages) >= 2 and rng.random() < 0.25):  # the first thread gets a reply
            subject = f"{rng.choice(TOPICS)} for {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}"
            if subject in used:
                continue
            used.add(subject)
            if twins and rng.random() < 0.3:  # its twin runs alongside: a loose subject match takes both
                used.add(subject + " (follow-up)")
                active.append({"subject": subject + " (follow-up)", "left": rng.randint(1, 4), "last": None})
            thread = {"subject": subject, "left": rng.randint(1, 5), "last": None}
            active.append(thread)
        else:
            thread = rng.choice(active)
        last = thread["last"]
        # The first two messages (a thread and its first reply) come from people with a manager, so
        # every question kind has a thread even in the shortest mailbox.
        low = heads if len(messages) < 2 else 0
        who = rng.choice([i for i in range(low, n_people) if last is None or i != last[0]])
        reply = thread["last"] is not None
        subject = (rng.choice(REPLY_PREFIXES) if reply else "") + thread["subject"]
        to = rng.sample([i for i in range(n_people) if i != who], rng.randint(1, 3))
        t += datetime.timedelta(seconds=rng.randint(60, 20000))
        when = prose.format_time(t, time_style)
        values = {
            "From": from_header(staff[who], addresses[who], rng.choice(styles)),
            "To": ", ".join(addresses[i] for i in to),
            "Date": when,
            "Subject": subject,
        }
        head = [sep.format(n=len(messages) + 1)] + [f"{f}: {values[f]}" for f in fields]
        body = [snippets.next(60, 400) for _ in range(rng.randint(1, 3))]
        if reply and rng.random() < 0.7:
            prev_who, prev_when, prev_body = thread["last"]
            body.append(f"On {prev_when}, {staff[prev_who].full} wrote:\n> {prev_body[:120]}")
        text = (
            budget.struct("\n".join(head), prose.WORDY_CHARS_PER_TOKEN)
            + "\n\n"
            + "\n\n".join(budget.prose(b) for b in body)
        )
        parts.append(text + budget.struct(f"\n\n-- \n{staff[who].first}"))
        messages.append(Message(addresses[who], subject, thread["subject"]))
        thread["last"] = (who, when, body[0])
        thread["left"] -= 1
        if thread["left"] < 0:
            active.remove(thread)
    intro = f"Mailbox export: {len(messages)} messages."
    blocks = [intro, directory_text, *parts] if rng.random() < 0.5 else [intro, *parts, directory_text]
    info = {"staff": staff, "addresses": addresses, "managers": managers, "messages": messages}
    return "\n\n".join(blocks), info


_ADDRESS = re.compile(r"[\w.+-]+@[\w.-]+\.example")
_LINE_DIR = re.compile(r"^([^<>\n]+?) <([^<>\n]+)> — \w+; (?:reports to (.+)|head of \w+)$", re.M)
_BLOCK_DIR = re.compile(r"^name: (.+)\nemail: (.+)\nteam: .+\nmanager: (.+)$", re.M)


def parse_directory(document: str) -> dict[str, tuple[str, str | None]]:
    """address -> (full name, manager's full name or None), from whichever directory style is present."""
    out: dict[str, tuple[str, str | None]] = {}
    for name, address, boss in _LINE_DIR.findall(document):
        out[address] = (name, boss or None)
    for name, address, boss in _BLOCK_DIR.findall(document):
        out[address] = (name, None if boss == "—" else boss)
    header = re.search(
        r"^\| ((?:Name|E-mail|Team|Manager)(?: \| (?:Name|E-mail|Team|Manager)){3}) \|$", document, re.M
    )
    if header:
        cols = header.group(1).split(" | ")
        for row in re.findall(r"^\| (.+@.+) \|$", document, re.M):
            cell = dict(zip(cols, row.split(" | "), strict=True))
            out[cell["E-mail"]] = (cell["Name"], None if cell["Manager"] == "—" else cell["Manager"])
    if not out:
        raise InvalidTaskError("no staff directory")
    return out


def parse_messages(document: str) -> list[tuple[str, str]]:
    """(sender address, subject) of every message, in order."""
    out = []
    for chunk in SEPARATOR_RE.split(document)[1:]:
        head = chunk.strip("\n").split("\n\n", 1)[0]
        fields = dict(line.split(": ", 1) for line in head.split("\n"))
        out.append((_ADDRESS.search(fields["From"]).group(0), fields["Subject"]))  # type: ignore[union-attr]
    return out


_Q = {"subject": SUBJECT}
_NAME = " Answer with their full name."
MANAGER_QUESTIONS = {
    "starter": Phrasings(
        (
            'Who is the manager of the person who started the e-mail thread "{subject}"?' + _NAME,
            'The first message with the subject "{subject}" (not a reply) was sent by someone. Who do they report to?'
            + _NAME,
            'Look up whoever opened the thread "{subject}" in the staff directory. Who is their manager?'
            + _NAME,
            'According to the directory, who manages the sender of the original "{subject}" e-mail?' + _NAME,
            'Whose direct report started the conversation titled "{subject}"?' + _NAME,
        ),
        _Q,
    ),
    "first_reply": Phrasings(
        (
            'Who is the manager of the person who sent the first reply in the e-mail thread "{subject}"?'
            + _NAME,
            'The earliest reply to "{subject}" came from someone. Who do they report to?' + _NAME,
            'Look up the author of the first "Re:" message in the thread "{subject}". Who is their manager?'
            + _NAME,
            'According to the directory, who manages whoever replied first to "{subject}"?' + _NAME,
            'Whose direct report wrote the first answer in the conversation titled "{subject}"?' + _NAME,
        ),
        _Q,
    ),
}
REPLIER_QUESTIONS = {
    "names": Phrasings(
        (
            'List everyone who replied in the e-mail thread "{subject}". Give full names, separated by commas.',
            'Who sent replies to "{subject}"? List each person once, by full name.',
            'Name all the people who answered in the thread titled "{subject}" (full names, comma-separated).',
            'Which people wrote a reply (a "Re:" message) in the thread "{subject}"? Give their full names.',
            'Give the full names of all senders of replies in the conversation "{subject}".',
        ),
        _Q,
    ),
    "addresses": Phrasings(
        (
            'List the e-mail addresses of everyone who replied in the thread "{subject}", separated by commas.',
            'Which addresses sent replies to "{subject}"? List each once.',
            'Give the sender address of every reply in the conversation titled "{subject}" (each address once).',
            'From which e-mail addresses did replies to "{subject}" come? Comma-separated.',
            'Collect the distinct From addresses of the replies in the thread "{subject}".',
        ),
        _Q,
    ),
}


def _thread_messages(messages: list[tuple[str, str]], subject: str) -> tuple[str, list[str]]:
    """(starter address, reply addresses in order) of the thread with exactly this subject."""
    starter = find_one([a for a, s in messages if s == subject], f"original of {subject!r}")
    return starter, [a for a, s in messages if s != subject and thread_of(s) == subject]


def _manager_answer(kind: str, subject: str, messages: list[tuple[str, str]], staff: dict) -> str:
    starter, replies = _thread_messages(messages, subject)
    who = starter if kind == "starter" else replies[0]
    boss = staff[who][1]
    if boss is None:
        raise InvalidTaskError(f"{who} has no manager")
    return boss


def _threads_for(info: dict, kind: str) -> list[str]:
    addresses, managers = info["addresses"], info["managers"]
    threads: dict[str, list[str]] = {}
    for m in info["messages"]:
        threads.setdefault(m.thread, []).append(m.sender)
    fits = []
    for subject, senders in sorted(threads.items()):
        if len(senders) < 2:
            continue
        who = senders[0] if kind == "starter" else senders[1]
        if kind in MANAGER_QUESTIONS and managers[addresses.index(who)] is None:
            continue
        fits.append(subject)
    return fits


def _pick_question(rng: random.Random, info: dict, kinds: tuple[str, ...]) -> tuple[str, str]:
    """A kind and a thread that fits it; a short mailbox may fit only the other kind."""
    order = rng.sample(kinds, len(kinds))
    for kind in order:
        fits = _threads_for(info, kind)
        if fits:
            return kind, rng.choice(fits)
    raise InvalidTaskError("no thread fits any question: the mailbox is too short")


def generate_manager(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"email_manager/{seed}")
    document, info = build(rng, corpora, length_tokens, difficulty)
    kind, subject = _pick_question(rng, info, tuple(MANAGER_QUESTIONS))
    question = MANAGER_QUESTIONS[kind].write(rng, subject=subject)
    gold = _manager_answer(kind, subject, parse_messages(document), parse_directory(document))
    meta = {"kind": kind, "messages": len(info["messages"])}
    return make_task(
        "email_manager", seed, length_tokens, difficulty, question, gold, "exact", document, meta
    )


def solve_manager(question: str, document: str) -> str:
    kind, slots = prose.parse_kind(MANAGER_QUESTIONS, question)
    return _manager_answer(kind, slots["subject"], parse_messages(document), parse_directory(document))


def wrong_manager(task: Task, document: str) -> list[str]:
    _, slots = prose.parse_kind(MANAGER_QUESTIONS, task.question)
    staff = parse_directory(document)
    starter, replies = _thread_messages(parse_messages(document), slots["subject"])
    people = {staff[a][0] for a in [starter, *replies]} | {
        b for a in [starter, *replies] if (b := staff[a][1])
    }
    return [*sorted(people - {task.answer}), ""]


def _repliers(kind: str, subject: str, messages: list[tuple[str, str]], staff: dict) -> list[str]:
    _, replies = _thread_messages(messages, subject)
    return sorted({staff[a][0] if kind == "names" else a for a in replies})


def generate_repliers(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"email_repliers/{seed}")
    document, info = build(rng, corpora, length_tokens, difficulty)
    kind, subject = _pick_question(rng, info, tuple(REPLIER_QUESTIONS))
    question = REPLIER_QUESTIONS[kind].write(rng, subject=subject)
    gold = _repliers(kind, subject, parse_messages(document), parse_directory(document))
    meta = {"kind": kind, "messages": len(info["messages"]), "repliers": len(gold)}
    return make_task(
        "email_repliers", seed, length_tokens, difficulty, question, gold, "set_f1", document, meta
    )


def solve_repliers(question: str, document: str) -> list[str]:
    kind, slots = prose.parse_kind(REPLIER_QUESTIONS, question)
    return _repliers(kind, slots["subject"], parse_messages(document), parse_directory(document))


def wrong_repliers(task: Task, document: str) -> list[list[str]]:
    kind, slots = prose.parse_kind(REPLIER_QUESTIONS, task.question)
    staff = parse_directory(document)
    starter, _ = _thread_messages(parse_messages(document), slots["subject"])
    starter_id = staff[starter][0] if kind == "names" else starter
    gold = list(task.answer)  # type: ignore[arg-type]
    outsider = next(
        v[0] if kind == "names" else a
        for a, v in sorted(staff.items())
        if a != starter and (v[0] if kind == "names" else a) not in gold
    )
    wrong = [gold[:-1], [*gold, outsider], [outsider], []]
    if starter_id not in gold:
        wrong.append([*gold, starter_id])
    return [w for w in wrong if w != gold]


MANAGER = Family(
    "email_manager",
    "the manager (from the staff directory) of a thread's starter or first replier",
    generate_manager,
    solve_manager,
    wrong_manager,
    True,
)
REPLIERS = Family(
    "email_repliers",
    "everyone who replied in an e-mail thread",
    generate_repliers,
    solve_repliers,
    wrong_repliers,
    True,
)
FAMILIES = (MANAGER, REPLIERS)
