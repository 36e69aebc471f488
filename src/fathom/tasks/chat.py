"""Chat logs: who spoke right before / after a quoted message (`chat_prev`), and counts of messages under a
condition (`chat_count`).

A document is an exported chat channel: a title line, then one message per line in one of `LAYOUTS`
(chosen by the seed), for example::

    [2024-03-05 14:22:07] <Alice> And God said, Let there be light: and there was light.
    05.03.2024 14:22 | alice.moreno: the Bionic Dog drinks too much and kicks over the forest
    Alice M. (Tue, 05 Mar 2024 14:22:07): the Bionic Dog gets a hormonal short-circuit

with timestamps in one of `prose.TIME_STYLES`, speaker handles in one of `HANDLES`, bodies cut from one
prose corpus, and noise lines between messages (joins, quits, topic changes, day markers) that are not
messages. Times rise through the log; a speaker may post several messages in a row.

chat_prev asks "Who spoke right before (or after) NAME said "QUOTE"?": the quote is 7 words of NAME's
message that occur once in the log, except at medium/hard, where another speaker echoes the quote later
("> QUOTE" and a reply), so the speaker must match too. The neighbour is always someone other than NAME.
Gold: the neighbour's handle as written; metric ``exact``.

chat_count asks how many messages NAME posted between two times, how many messages anyone posted
between two times, or how many of NAME's messages contain a word (whole word, any case). Question times
are on whole minutes in a minute-resolution style (`prose.MINUTE_STYLES`), both inclusive, and no
message falls inside either boundary minute, so formats without seconds are never ambiguous. Gold: an
int; metric ``numeric``.

For an expert: `parse_log(document)` gives (timestamp, handle, body) per message; `QUESTIONS` holds the
phrasings of every kind. Difficulty: easy 4 speakers, medium 8, hard 14 (and echoes).

This module does not write threaded replies (see `fathom.tasks.email`).
"""

from __future__ import annotations

import datetime
import random
import re

from fathom.tasks import prose
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.haystack import Corpora
from fathom.tasks.prose import QUOTE, Budget, Phrasings, Snippets
from fathom.tasks.schema import Task
from fathom.tasks.words import NOUNS

LAYOUTS = {
    "irc": ("[{ts}] <{name}> {text}", r"\[(?P<ts>{ts})\] <(?P<name>[^<>\n]+)> (?P<text>.*)"),
    "pipe": ("{ts} | {name}: {text}", r"(?P<ts>{ts}) \| (?P<name>[^:|\n]+?): (?P<text>.*)"),
    "dash": ("{ts} - {name} - {text}", r"(?P<ts>{ts}) - (?P<name>.+?) - (?P<text>.*)"),
    "paren": ("{name} ({ts}): {text}", r"(?P<name>[^()*\n-][^()\n]*?) \((?P<ts>{ts})\): (?P<text>.*)"),
    "arrow": ("{ts} {name} >> {text}", r"(?P<ts>{ts}) (?P<name>.+?) >> (?P<text>.*)"),
}
HANDLES = ("first", "lower", "dotted", "initial")
NOISE = (
    "*** {name} has joined #{channel}",
    "*** {name} has quit (Ping timeout: 252 seconds)",
    "*** {name} has left #{channel}",
    "-!- {name} changed the topic of #{channel} to: {topic}",
    "--- Day changed: {day} ---",
)
TITLES = (
    "Chat log of #{channel}, exported {day}",
    "# #{channel} — message history (exported {day})",
    "=== Channel #{channel} — transcript starting {day} ===",
)
# difficulty -> (speakers, echo of the quote by another speaker)
LEVELS = {"easy": (4, False), "medium": (8, True), "hard": (14, True)}
NAME_SLOT = r"[A-Za-z][A-Za-z. ]*?"
_ANSWER = (" Answer with the name only.", " Give just the handle as written in the log.", "")
PREV_BEFORE = tuple(
    t + a
    for t in (
        'In the chat log, who sent the message right before {name} wrote "{quote}"?',
        "Who spoke immediately before {name} said “{quote}”?",
        'Find where {name} says "{quote}". Who posted the message just before it?',
        'Which participant wrote the last message before {name}\'s message "{quote}"?',
        "Right before {name} posted “{quote}”, someone else spoke. Who was it?",
    )
    for a in _ANSWER
)
PREV_AFTER = tuple(
    t + a
    for t in (
        'In the chat log, who sent the message right after {name} wrote "{quote}"?',
        "Who spoke immediately after {name} said “{quote}”?",
        'Find where {name} says "{quote}". Who posted the next message?',
        'Which participant wrote the first message after {name}\'s message "{quote}"?',
        "Right after {name} posted “{quote}”, someone else spoke. Who was it?",
    )
    for a in _ANSWER
)
PREV_QUESTIONS = {
    "before": Phrasings(PREV_BEFORE, {"name": NAME_SLOT, "quote": QUOTE}),
    "after": Phrasings(PREV_AFTER, {"name": NAME_SLOT, "quote": QUOTE}),
}
_TIME = "(?:" + "|".join(prose.time_regex(s) for s in prose.MINUTE_STYLES) + ")"
_NUM = " Answer with a number."
_COUNT_SLOTS = {"name": NAME_SLOT, "t1": _TIME, "t2": _TIME, "word": "[a-z]+"}
COUNT_QUESTIONS = {
    "speaker_window": Phrasings(
        (
            "How many messages did {name} post between {t1} and {t2} (both inclusive)?" + _NUM,
            "Count the messages written by {name} from {t1} to {t2}, inclusive." + _NUM,
            "Between {t1} and {t2} (inclusive), how many times did {name} send a message?" + _NUM,
            "In the log, how many of the messages timestamped {t1} through {t2} are from {name}?" + _NUM,
            "From {t1} up to and including {t2}, how many messages came from {name}?" + _NUM,
        ),
        _COUNT_SLOTS,
    ),
    "window": Phrasings(
        (
            "How many messages were posted in total between {t1} and {t2} (both inclusive)?" + _NUM,
            "Count all chat messages from {t1} to {t2}, inclusive, whoever sent them." + _NUM,
            "Between {t1} and {t2} (inclusive), how many messages does the log contain?" + _NUM,
            "How many messages, by anyone, are timestamped {t1} through {t2}?" + _NUM,
            "From {t1} up to and including {t2}, how many messages were sent?" + _NUM,
        ),
        _COUNT_SLOTS,
    ),
    "speaker_word": Phrasings(
        (
            "How many of the messages posted by {name} contain the word '{word}' (in any case)?" + _NUM,
            "Count {name}'s messages that use the word '{word}', ignoring case." + _NUM,
            "In how many of its messages does {name} write the word '{word}' (any capitalisation)?" + _NUM,
            "How many messages from {name} mention '{word}' as a whole word, in any case?" + _NUM,
            "Of everything {name} posted, how many messages include the word '{word}' (case-insensitive)?"
            + _NUM,
        ),
        _COUNT_SLOTS,
    ),
}


def handle(person: prose.Person, style: str) -> str:
    return {
        "first": person.first,
        "lower": person.first.lower(),
        "dotted": f"{person.first}.{person.last}".lower(),
        "initial": f"{person.first} {person.last[0]}.",
    }[style]


class Log:
    """A generated chat log: its text and, per message, (line index, time, handle, body)."""

    def __init__(
        self, lines: list[str], messages: list[tuple[int, datetime.datetime, str, str]], lead: str = ""
    ):
        self.lines = lines
        self.messages = messages
        self.lead = lead  # the speaker whose share build_log was asked to set ("" if none)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def build_log(
    rng: random.Random,
    corpora: Corpora,
    length_tokens: int,
    n_speakers: int,
    lead_share: float | None = None,
    body_max: int = 260,
) -> Log:
    """A log of about `length_tokens`; with `lead_share`, its first speaker (`Log.lead`) posts about that
    share of the messages. Shorter bodies (`body_max`) give more messages for the same length."""
    layout, style = rng.choice(sorted(LAYOUTS)), rng.choice(prose.TIME_STYLES)
    names = [handle(p, rng.choice(HANDLES)) for p in prose.people(rng, n_speakers)]
    weights = [rng.uniform(0.3, 1.0) for _ in names]
    if lead_share is not None:
        weights[0] = lead_share / (1 - lead_share) * sum(weights[1:])
    channel = f"{rng.choice(NOUNS)}-{rng.choice(('ops', 'dev', 'general', 'support', 'random'))}"
    source = prose.prose_source(rng, corpora, int(length_tokens * 3.3))
    budget = Budget(source)
    snippets = Snippets(corpora, rng, source, int(length_tokens * 3.3) + 4000)
    t = prose.random_start(rng)
    day = prose.format_time(t, "long").split(",")[0]
    lines = [budget.struct(rng.choice(TITLES).format(channel=channel, day=day)), ""]
    messages: list[tuple[int, datetime.datetime, str, str]] = []
    template = LAYOUTS[layout][0]
    while budget.tokens < length_tokens - 30:
        gap = rng.choice((rng.randint(5, 240), rng.randint(5, 240), rng.randint(240, 900), 2400))
        previous, t = t, t + datetime.timedelta(seconds=gap)
        if t.date() != previous.date():
            lines.append(budget.struct(NOISE[4].format(day=prose.format_time(t, "long").split(",")[0])))
        if rng.random() < 0.03:
            noise = rng.choice(NOISE[:4])
            topic = snippets.next(20, 60)
            lines.append(budget.struct(noise.format(name=rng.choice(names), channel=channel, topic=topic)))
        name = rng.choices(names, weights)[0]
        body = snippets.next(20, body_max)
        head = template.format(ts=prose.format_time(t, style), name=name, text="")
        messages.append((len(lines), t, name, body))
        lines.append(budget.line(head, body))
    return Log(lines, messages, names[0] if lead_share is not None else "")


def message_regex(document: str) -> tuple[re.Pattern[str], str]:
    """The regex that reads this log's messages and its time style, found from its first message."""
    candidates = [
        (re.compile("^" + regex.format(ts=prose.time_regex(style)) + "$", re.MULTILINE), style)
        for _, regex in LAYOUTS.values()
        for style in prose.TIME_STYLES
    ]
    for line in document.split("\n", 40)[:40]:
        fits = [(c, style) for c, style in candidates if c.fullmatch(line)]
        if fits:
            return find_one(fits, "message layout")
    raise InvalidTaskError("no chat message in the first 40 lines")


def parse_log(document: str) -> list[tuple[datetime.datetime, str, str]]:
    """(time, handle, body) of every message line, in order; noise lines are skipped."""
    pattern, style = message_regex(document)
    return [(prose.parse_time(m["ts"], style), m["name"], m["text"]) for m in pattern.finditer(document)]


def _neighbour_index(log: Log, rng: random.Random, direction: str) -> int:
    """A message whose neighbour in `direction` is by someone else."""
    step = -1 if direction == "before" else 1
    msgs = log.messages
    for _ in range(200):
        i = rng.randrange(1, len(msgs) - 1)
        if msgs[i + step][2] != msgs[i][2]:
            return i
    raise InvalidTaskError("no message with a different neighbour")


def generate_prev(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"chat_prev/{seed}")
    n_speakers, echo = LEVELS[difficulty]
    direction = rng.choice(("before", "after"))
    log = build_log(rng, corpora, length_tokens, n_speakers)
    text = log.text
    for _ in range(100):
        i = _neighbour_index(log, rng, direction)
        quote = prose.unique_quote(rng, log.messages[i][3], text)
        if quote is not None:
            break
    else:
        raise InvalidTaskError("no unique quote found")
    line, _, name, _ = log.messages[i]
    gold = log.messages[i + (-1 if direction == "before" else 1)][2]
    if echo:  # another speaker quotes the message later: matching the quote alone finds two lines
        later = (
            rng.randrange(i + 2, len(log.messages)) if i + 2 < len(log.messages) else len(log.messages) - 1
        )
        j, _, other, body = log.messages[later]
        if other != name:
            log.lines[j] = log.lines[j].replace(body, f"> {quote} — {body}", 1)
        text = log.text
    question = PREV_QUESTIONS[direction].write(rng, name=name, quote=quote)
    meta = {"direction": direction, "messages": len(log.messages), "line": line}
    return make_task("chat_prev", seed, length_tokens, difficulty, question, gold, "exact", text, meta)


def solve_prev(question: str, document: str) -> str:
    direction, slots = prose.parse_kind(PREV_QUESTIONS, question)
    msgs = parse_log(document)
    hits = [i for i, (_, name, body) in enumerate(msgs) if name == slots["name"] and slots["quote"] in body]
    i = find_one(hits, "quoted message")
    return msgs[i - 1 if direction == "before" else i + 1][1]


def wrong_prev(task: Task, document: str) -> list[str]:
    names = sorted({name for _, name, _ in parse_log(document)} - {task.answer})
    return [*names, ""]


def _boundaries(log: Log) -> list[int]:
    """Indices g such that a whole minute lies strictly between message g and g + 1."""
    out = []
    msgs = log.messages
    for g in range(len(msgs) - 1):
        a = msgs[g][1].replace(second=0)
        if msgs[g + 1][1] >= a + datetime.timedelta(minutes=2):
            out.append(g)
    return out


COUNT_WEIGHTS = (0.45, 0.45, 0.1)  # speaker_window, window, speaker_word (word counts stay small)


def generate_count(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"chat_count/{seed}")
    n_speakers, _ = LEVELS[difficulty]
    kind = rng.choices(tuple(COUNT_QUESTIONS), COUNT_WEIGHTS)[0]
    # The asked speaker posts 5% to 80% of the messages, and bodies are short (more messages per token),
    # so counts spread from a handful to a couple of hundred: a blind guess near the usual count rarely
    # comes close.
    log = build_log(rng, corpora, length_tokens, n_speakers, rng.uniform(0.05, 0.8), body_max=140)
    msgs = log.messages
    name = log.lead
    slots = {"name": name, "t1": "", "t2": "", "word": ""}
    if kind == "speaker_word":
        words: dict[str, int] = {}
        for _, _, who, body in msgs:
            if who == name:
                for w in set(re.findall(r"[a-z]+", body.lower())):
                    words[w] = words.get(w, 0) + 1
        # Words used 3 to 60 times by the speaker; a short log may only have words used once or twice.
        fits = sorted(w for w, c in words.items() if 3 <= c <= 60 and len(w) >= 4)
        fits = fits or sorted(w for w in words if len(w) >= 4)
        # Uniform over the counts that occur, not over words (most words are used only a few times).
        count = rng.choice(sorted({words[w] for w in fits}))
        slots["word"] = rng.choice([w for w in fits if words[w] == count])
    else:
        cuts = _boundaries(log)
        if len(cuts) < 4:
            raise InvalidTaskError("the log is too short for a time window")
        a = rng.randrange(len(cuts) // 4)
        rest = len(msgs) - cuts[a]
        # In messages: any part of the rest of the log (at least 40% of it when one speaker is counted,
        # so that speaker's count is not mostly tiny).
        span = rng.randint(5 if kind == "window" else max(5, rest * 2 // 5), max(5, rest))
        b = min(
            len(cuts) - 1, next((k for k in range(a, len(cuts)) if cuts[k] - cuts[a] >= span), len(cuts) - 1)
        )
        if b <= a:
            raise InvalidTaskError("the log is too short for a time window")
        style = rng.choice(prose.MINUTE_STYLES)
        start = msgs[cuts[a]][1].replace(second=0) + datetime.timedelta(minutes=1)
        end = msgs[cuts[b]][1].replace(second=0) + datetime.timedelta(minutes=1)
        slots["t1"], slots["t2"] = prose.format_time(start, style), prose.format_time(end, style)
    question = COUNT_QUESTIONS[kind].write(rng, **slots)
    parsed = [(t, who, body) for _, t, who, body in msgs]
    gold = _count(kind, slots, parsed)
    meta = {"kind": kind, "messages": len(msgs)}
    return make_task("chat_count", seed, length_tokens, difficulty, question, gold, "numeric", log.text, meta)


def _parse_minute(text: str) -> datetime.datetime:
    styles = [s for s in prose.MINUTE_STYLES if re.fullmatch(prose.time_regex(s), text)]
    return prose.parse_time(text, find_one(styles, "time style"))


def _count(kind: str, slots: dict[str, str], msgs: list[tuple[datetime.datetime, str, str]]) -> int:
    if kind == "speaker_word":
        word = re.compile(rf"\b{slots['word']}\b", re.IGNORECASE)
        return sum(1 for _, who, body in msgs if who == slots["name"] and word.search(body))
    start, end = _parse_minute(slots["t1"]), _parse_minute(slots["t2"]) + datetime.timedelta(minutes=1)
    return sum(1 for t, who, _ in msgs if start <= t < end and (kind == "window" or who == slots["name"]))


def solve_count(question: str, document: str) -> int:
    kind, slots = prose.parse_kind(COUNT_QUESTIONS, question)
    return _count(kind, slots, parse_log(document))


def wrong_count(task: Task, document: str) -> list[int | str]:
    gold = int(task.answer)  # type: ignore[arg-type]
    return [gold + 1, gold - 1, gold + 4, gold * 2 + 1, "several"]


PREV = Family(
    "chat_prev",
    "who spoke right before/after a quoted chat message",
    generate_prev,
    solve_prev,
    wrong_prev,
    True,
)
COUNT = Family(
    "chat_count",
    "count chat messages by speaker, time window or word",
    generate_count,
    solve_count,
    wrong_count,
    True,
)
FAMILIES = (PREV, COUNT)
