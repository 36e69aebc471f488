"""The teacher: a scripted policy that knows only the conversation, the default source of SFT transcripts.

It reads the question and what its own code printed, nothing else (no task object, family name, gold or
generator format), and plays the moves of a careful RLM: look (length, head, sampled lines), search for
the terms the question names and print their lines, follow identifiers the hits mention, compute in code
(digits, counts, pairs) or hand a small set of lines to `llm()` with the question, notice an empty or
doubtful result and try another way, and answer with FINAL. Which moves it plays depends on what it sees:
``Field: value`` records whose categories the head lists are parsed and labelled by `llm()` in chunks, then
aggregated as the question asks; a delimited table (`fathom.policies.tabular`), a log
(`fathom.policies.log_entries`) and JSON Lines (`fathom.policies.json_records`) are parsed, filtered and
computed in code; after the search move, Python source is searched by its syntax
(`fathom.policies.source_code`) and a mailbox thread whose subject the search found is parsed by its headers,
its senders looked up in the staff directory (`fathom.policies.mail_headers`); short one-line facts are
gathered and read as a story; identifiers are followed to every line they reach; anything else falls back to
the lines sharing the question's words.

A strategy is a generator (``obs = yield turn_text``); `teacher_turn(conversation)` replays it from the
start over the observations so far, so the policy is a pure function of the conversation text. Wording and
ways of writing each move are drawn from a `random.Random` seeded by the question (and a run seed).

`teacher_backend` wraps it as a `ScriptedBackend`; its `llm()` calls are answered in evaluation and SFT by
`fathom.policies.readers.teacher_reader`. Transcripts are checked by `fathom.policies.grounding`.
`play_teacher` plays it on tasks through the real rollout engine (tests, `bench/teacher_turns.py`).
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Generator
from typing import Any

from fathom.policies import moves
from fathom.policies.blocks import HEAD_CHARS, filter_cell, filter_plan, part_count_cell, part_count_plan
from fathom.policies.excerpts import (
    CHUNK_CHARS,
    READER_TOKENS,
    Cut,
    combine,
    cut_cell,
    defined_cells,
    needs_neighbours,
    parse_replies,
    read_cell,
    useful,
)
from fathom.policies.json_records import answer_cell as records_cell
from fathom.policies.json_records import index_cell, json_shape, records_ask, terms_of
from fathom.policies.log_entries import answer_cell, log_question, log_shape, parse_cell, parse_services
from fathom.policies.looking import Question, Sight, parse_look, read_question
from fathom.policies.mail_headers import (
    MailAsk,
    answer_turn,
    mail_question,
    parse_thread,
    sender_cell,
    senders,
    thread_cell,
)
from fathom.policies.scripted import TURN_FOOTER, ScriptedBackend
from fathom.policies.slips import with_slips
from fathom.policies.source_code import code_cell, code_question, code_shape
from fathom.policies.tabular import plan, table_cell, table_shape
from fathom.rollout.chat import ChatFormat

Play = Generator[str, str, None]
FIRST = re.compile(r"Question: (.*?)\n\n`ctx` is a str of [\d,]+ characters", re.S)
OBS_START = re.compile(r"\[output\]\n|\[cell 1\]\n|No ```repl``` code block found")
NO_LLM = "`llm` and `llm_batch` are not available"
FOLLOW_LIMIT = 6  # an identifier seen more often than this is vocabulary, not a pointer
RARE_HITS = 30  # a question word found at most this often names something; more often, it is vocabulary


def split_conversation(conversation: str) -> tuple[str, list[str], bool]:
    """(question, observations in order, llm available) of a decoded conversation."""
    m = FIRST.search(conversation)
    if m is None:
        raise ValueError("the teacher was given a conversation with no question")
    observations, after = [], m.end()
    for footer in TURN_FOOTER.finditer(conversation, m.end()):
        starts = [s.start() for s in OBS_START.finditer(conversation, after, footer.start())]
        if not starts:
            raise ValueError("an environment reply with no output marker before its footer")
        observations.append(conversation[starts[-1] : footer.start()])
        after = footer.end()
    return m.group(1), observations, NO_LLM not in conversation[m.start() : m.start() + len(m.group(0)) + 200]


def parse_hits(observation: str) -> dict[str, tuple[int, list[str]]]:
    """The search move's printout: term -> (hit count, the lines shown)."""
    out: dict[str, tuple[int, list[str]]] = {}
    term = None
    for line in observation.splitlines():
        if m := re.match(r"^('.*'|\".*\"): (\d+) hits$", line):
            term = ast.literal_eval(m.group(1))  # the term as repr() printed it
            out[term] = (int(m.group(2)), [])
        elif term is not None and line.startswith("    "):
            out[term][1].append(line[4:])
    return out


def parse_ids(observation: str) -> list[str]:
    """The search move's line of found terms shaped like ids (`moves.IDS_FOUND`); none if it is missing."""
    for line in observation.splitlines():
        if line.startswith(moves.IDS_FOUND):
            return [str(t) for t in ast.literal_eval(line[len(moves.IDS_FOUND) :].strip())]
    return []


def _number(pattern: str, observation: str) -> int | None:
    m = re.search(pattern, observation)
    return int(m.group(1)) if m else None


def _give_up(rng: random.Random) -> str:
    return moves.turn(
        rng,
        ("I could not find what the question asks for; I answer that it is not there.",),
        'FINAL("not found")',
    )


def play(q: Question, rng: random.Random, llm_ok: bool, chunk_size: int = CHUNK_CHARS) -> Play:
    """The teacher's game for one question; its reading cells cut what they read into `chunk_size` characters."""
    obs = yield moves.look(rng)
    sight = parse_look(obs)
    fields, categories = sight.record_fields(), sight.categories()
    if llm_ok and fields and q.quoted and set(q.quoted) & set(categories):
        yield from _records(q, rng, sight, fields, categories)
        return
    records = json_shape(sight)
    if records:
        obs = yield index_cell(rng, terms_of(q))
        ask = records_ask(q, records, obs)
        if ask:  # it FINALs the one record that fits; where none or several do, the search goes on
            yield records_cell(rng, ask)
    shape = table_shape(sight)
    table_plan = plan(q, shape) if shape else None
    if shape and table_plan:
        yield table_cell(rng, shape, table_plan)
        return
    log, ask = log_shape(sight), log_question(q)
    if log and ask:
        obs = yield parse_cell(rng, log)
        cell = answer_cell(rng, log, ask, parse_services(obs))
        # it FINALs what it finds; where it finds nothing, or no listed service fits, the search goes on
        if cell:
            yield cell
    terms = list(dict.fromkeys([*q.searched, *q.anchors, *q.snake, *q.names, *q.things]))[:8]
    terms += [w for w in dict.fromkeys(q.words) if w not in " ".join(terms)][: 10 - len(terms)]
    obs = yield moves.search(rng, terms)
    hits = parse_hits(obs)
    if mail := mail_question(q, hits):  # the quoted subject is on Subject: lines: a mailbox
        yield from _mail(rng, mail)
    yield from _compute(q, rng, sight, hits)
    code = code_question(q) if code_shape(sight) else None
    if (
        code
    ):  # after the search, which showed the lines it parses; it FINALs what it finds, else reading goes on
        yield code_cell(rng, code)
    found = parse_ids(obs)  # what it printed decides whether to follow: nothing the student cannot see
    on_headings = _heading_prefixes(_rare_first(found, hits, FOLLOW_LIMIT), hits, sight.heading_prefixes())
    shown = [line for _, lines in hits.values() for line in lines]
    short = [line for line in shown if len(line.split()) <= 8 and line.rstrip().endswith(".")]
    if llm_ok and q.stated_total and short and not found:
        if not (yield from _story(q, rng)):
            yield from _keywords(q, rng)
    elif (
        found and not on_headings and (yield from _follow(q, rng, found, llm_ok))
    ):  # a name found only on headings points at the section below it, which a follow would not reach
        return
    elif llm_ok and not (yield from _excerpts(q, rng, sight, hits, chunk_size)):
        yield from _keywords(q, rng)


def _mail(rng: random.Random, mail: MailAsk) -> Play:
    """The thread's messages by their headers, then the senders' addresses, or their directory entries and
    what those say; each cell FINALs only what it found, else the teacher goes on to read."""
    obs = yield thread_cell(rng, mail)
    addresses = senders(mail, parse_thread(obs))
    if not addresses:
        return
    obs = yield sender_cell(rng, mail, addresses)
    if mail.want != "addresses" and (final := answer_turn(rng, mail, obs)):
        yield final


def _compute(q: Question, rng: random.Random, sight: Sight, hits: dict) -> Play:
    """Answer in code when the question and the hits show how (`fathom.policies.blocks`); a cell that
    finds nothing does not FINAL, and the teacher goes on to read."""
    if counting := part_count_plan(q, sight, hits):
        yield part_count_cell(rng, counting)
    if listing := filter_plan(q, hits):
        yield filter_cell(rng, listing)


def _rare_first(terms: list[str], hits: dict, limit: int) -> list[str]:
    """The terms found at most `limit` times, when there are any: a term found everywhere is vocabulary
    (a key every record sets), and the rare ones say where to look."""
    return [t for t in terms if hits.get(t, (0, []))[0] <= limit] or terms


def _heading_prefixes(keys: list[str], hits: dict, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """The heading prefixes that every shown hit line of the keys opens with, when all are short (heading
    lines): the keys name headings."""
    shown = [line for k in keys for line in hits.get(k, (0, []))[1]]
    if not shown or any(len(line) >= HEAD_CHARS for line in shown):
        return ()
    return tuple(p for p in prefixes if all(line.startswith(p) for line in shown))


def _aggregate_question(q: Question) -> bool:
    """A count, a list or a yes/no question: every part of the document may add to the answer."""
    lower = q.text.lower()
    return q.count or q.listing or bool(re.search(r"\bcount\b|number of|yes or no|\bevery\b|\ball\b", lower))


def _excerpts(
    q: Question, rng: random.Random, sight: Sight, hits: dict, chunk_size: int
) -> Generator[str, str, bool]:
    """Try cuts of the document from narrow to wide until llm() finds an answer; True once FINAL is sent."""
    # A snake_case name found often is a field every record has (what to aggregate), not a thing to locate.
    snake = [t for t in q.snake if hits.get(t, (0, []))[0] <= RARE_HITS]
    named = [
        t for t in dict.fromkeys([*q.searched, *q.anchors, *snake, *q.names]) if hits.get(t, (0, []))[0] > 0
    ]
    prefixes = sight.heading_prefixes()
    keys, rare = named, _rare_first(named, hits, RARE_HITS)
    if not _aggregate_question(q) and _heading_prefixes(rare, hits, prefixes):
        keys = rare  # the rare names are headings: they bound where to read, the other terms are read inside
    if not keys and not _aggregate_question(q):
        rare = [(n, t) for t, (n, _) in hits.items() if 0 < n <= RARE_HITS and t in q.words]
        keys = [t for _, t in sorted(rare)[:2]]
    near = needs_neighbours(q)
    cuts = []
    if keys:
        scope = _heading_prefixes(keys, hits, prefixes)
        cuts.append(Cut(tuple(keys), context=3 if near else 0, paragraph=30, follow=True, scope=scope))
        if prefixes:
            cuts.append(Cut(tuple(keys), context=1 if near else 0, headings=prefixes))
            cuts.append(Cut(tuple(keys), headings=prefixes, sections=True))
    if not keys or _aggregate_question(q):
        cuts.append(Cut(()))
    last = None
    for cut in cuts:
        obs = yield cut_cell(rng, cut)
        kept = _number(r"(\d+) lines kept", obs)
        if not kept or kept == last:
            continue  # nothing, or the same lines as the last cut: no new reading to do
        last = kept
        if (yield from _read_kept(q, rng, chunk_size)):
            return True
        if cut.follow:
            # Nothing found: the lines a name reaches may be too many (split over chunks) or too few (a name
            # used too often to follow); keep instead where each name in the hits is defined, and read again.
            rare = tuple(t for t in cut.keys if hits[t][0] <= RARE_HITS)
            keys = rare if 0 < len(rare) < len(cut.keys) else ()
            for cell in defined_cells(rng, q, cut.context, keys, chunk_size):
                obs = yield cell
            last = _number(r"(\d+) lines kept", obs)
            if (yield from _answer(q, rng, obs)):
                return True
    return False


def _read_kept(q: Question, rng: random.Random, chunk_size: int) -> Generator[str, str, bool]:
    """Have llm() read the kept lines in chunks and FINAL the combined replies; True once FINAL is sent."""
    obs = yield read_cell(rng, q, chunk_size)
    return (yield from _answer(q, rng, obs))


def _answer(q: Question, rng: random.Random, obs: str) -> Generator[str, str, bool]:
    """FINAL the replies a reading cell printed, combined, if any is an answer; True once FINAL is sent."""
    replies = parse_replies(obs)
    if replies is None:
        return False
    named = {n.lower() for n in moves.asked_about(q)}
    answers = useful(q, replies)
    if answers and not all(a.strip().lower() in named for a in answers):  # a name it gave answers nothing
        yield combine(rng, q, answers, len(replies))
        return True
    return False


def _follow(q: Question, rng: random.Random, found: list[str], llm_ok: bool) -> Generator[str, str, bool]:
    """Follow the identifiers from the found anchors; True once it has sent FINAL (or has nothing left)."""
    obs = yield moves.follow(rng, found, FOLLOW_LIMIT)
    if not _number(r"(\d+) lines reached", obs):
        return not llm_ok
    if q.digits:
        yield moves.pick_digits(rng, q.digits, q.listing)  # FINALs when the values are unambiguous
    if llm_ok:
        return (yield from _read(q, rng, '"\\n".join(lines[i] for i in reached)'))
    return True


def _read(q: Question, rng: random.Random, source: str) -> Generator[str, str, bool]:
    obs = yield moves.read_lines(rng, q.text, source)
    reply = obs.partition("chars to read\n")[2].strip()
    if reply in ("''", '""', "") or moves.MISSING in reply.lower():
        return False
    yield moves.answer_reply(rng, q)
    # Resumed only when the cell did not FINAL: it printed that the reply is empty or repeats a name the
    # question gave, so the reading found nothing and another way is tried.
    return False


def _story(q: Question, rng: random.Random) -> Generator[str, str, bool]:
    obs = yield moves.story_lines(rng, q.stated_total, loose=False)
    n = _number(r"(\d+) story lines", obs) or 0
    if q.stated_total and n < q.stated_total:
        yield moves.story_lines(rng, q.stated_total, loose=True)
    return (yield from _read(q, rng, '"\\n".join(facts)'))


def _keywords(q: Question, rng: random.Random) -> Play:
    words = list(dict.fromkeys(w for w in q.words if len(w) >= 5))[:8]
    need = 2 if len(words) >= 3 else 1
    code = f"""
words = [w.lower() for w in {words!r}]
hits = [line for line in ctx.splitlines() if sum(w in line.lower() for w in words) >= {need}]
print(len(hits), "lines share the question's words")
for line in hits[:5]:
    print("   ", line[:160])
"""
    obs = yield moves.turn(
        rng, ("No identifier to follow; I look for the lines that share the question's words.",), code
    )
    if _number(r"(\d+) lines share", obs):
        yield from _read(q, rng, '"\\n".join(hits[:200])')


def _field(fields: list[str], sight: Sight, want: str) -> int | None:
    for i, name in enumerate(fields):
        if want in name.lower():
            return i
    return None


def _records(q: Question, rng: random.Random, sight: Sight, fields_sep: tuple, categories: list[str]) -> Play:
    fields, sep = fields_sep
    obs = yield moves.records(rng, fields, sep, q.stated_total)
    if not _number(r"(\d+) records", obs):
        return
    lengths = {i: 0 for i in range(len(fields))}
    for line in sight.shown:
        parts = line.split(sep)
        if len(parts) == len(fields):
            for i, part in enumerate(parts):
                lengths[i] += len(part)
    text_at = max(lengths, key=lengths.__getitem__)
    yield moves.classify(rng, text_at, categories)
    yield _aggregate(q, rng, fields, sight, categories)


def _aggregate(
    q: Question, rng: random.Random, fields: list[str], sight: Sight, categories: list[str]
) -> str:
    text, lower = q.text, q.text.lower()
    x = next((c for c in q.quoted if c in categories), "")
    y = next((c for c in q.quoted if c in categories and c != x), "")
    date_at = _field(fields, sight, "date")
    after = re.search(r"dated after ([A-Z][a-z]{2} \d{1,2}, \d{4}|\d{4}-\d{2}-\d{2})", text)
    if q.pairs:
        user_at = next((i for i, f in enumerate(fields) if re.search(rf"\b{f.lower()}\b", lower)), 0)
        if "at least two" in lower:
            first, second = "na >= 2", "nb >= 1"
        elif "' and at least one" in text:
            first = second = "na >= 1 and nb >= 1"
        else:
            first = second = "na + nb >= 1"
        code = f"""
tally = {{}}
for rec, label in zip(recs, labels):
    t = tally.setdefault(int(rec[{user_at}]), [0, 0])
    t[0] += label == {x!r}
    t[1] += label == {y!r}
can1 = {{u for u, (na, nb) in tally.items() if {first}}}
can2 = {{u for u, (na, nb) in tally.items() if {second}}}
found = sorted({{(min(u, v), max(u, v)) for u in can1 for v in can2 if u != v}})
print(len(found), found[:5])
FINAL([list(p) for p in found])
"""
    elif q.count and after and date_at is not None:
        fmt = "%Y-%m-%d" if "-" in after.group(1) else "%b %d, %Y"
        code = f"""
from datetime import datetime
cutoff = datetime.strptime({after.group(1)!r}, {fmt!r})
n = sum(label == {x!r} and datetime.strptime(rec[{date_at}], {fmt!r}) > cutoff for rec, label in zip(recs, labels))
print(n)
FINAL(n)
"""
    elif q.count:
        code = f"n = sum(label == {x!r} for label in labels)\nprint(n)\nFINAL(n)"
    elif "most common" in lower or "least common" in lower:
        pick = "max" if "most common" in lower else "min"
        code = f"counts = Counter(labels)\nFINAL({pick}({categories!r}, key=lambda c: counts[c]))"
    else:
        # The three possible answers, in the words the question offers them.
        more, less, same = ([*re.findall(r"more common|less common|same frequency", text), "", "", ""])[:3]
        code = f"""
nx, ny = labels.count({x!r}), labels.count({y!r})
print(nx, ny)
FINAL({more!r} if nx > ny else {less!r} if nx < ny else {same!r})
"""
    return moves.turn(
        rng,
        (
            "Now the labels are known, the rest is counting, in code.",
            "Aggregate the labels as the question asks.",
        ),
        code,
    )


def _replay(
    conversation: str, seed: int, slips: float, log: list[bool], chunk_size: int = CHUNK_CHARS
) -> tuple[str, int]:
    """(the next turn, the observations replayed) of the teacher over a decoded conversation."""
    question, observations, llm_ok = split_conversation(conversation)
    rng = random.Random(f"teacher/{seed}/{question}")
    game = with_slips(
        play(read_question(question), rng, llm_ok, chunk_size), f"{seed}/{question}", slips, log
    )
    try:
        text = next(game)
        for obs in observations:
            text = game.send(obs)
    except StopIteration:
        return _give_up(rng), len(observations)
    return text, len(observations)


def teacher_turn(conversation: str, seed: int = 0, slips: float = 0.0, chunk_size: int = CHUNK_CHARS) -> str:
    """The teacher's next turn for a decoded conversation (see the module docstring); with `slips` > 0 that
    share of its cells is first written faulty and repaired after the traceback (`fathom.policies.slips`);
    its reading cells cut what they hand to llm() into chunks of at most `chunk_size` characters."""
    return _replay(conversation, seed, slips, [], chunk_size)[0]


def slip_turns(conversation: str, seed: int, slips: float) -> list[int]:
    """The 0-based turns of a finished conversation (every turn followed by its observation) that the
    teacher wrote as slips, recomputed by replaying it: the turns SFT does not train on."""
    log: list[bool] = []
    _, played = _replay(conversation, seed, slips, log)
    return [i for i, slip in enumerate(log[:played]) if slip]


def teacher_backend(
    chat: ChatFormat, seed: int = 0, slips: float = 0.0, chunk_size: int = CHUNK_CHARS
) -> ScriptedBackend:
    """The teacher as a policy backend: any task, no task list (it reads only the conversation)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 character, got {chunk_size}")
    return ScriptedBackend(chat, lambda conversation: teacher_turn(conversation, seed, slips, chunk_size))


def play_teacher(
    chat: ChatFormat,
    tasks: list[Any],
    max_turns: int,
    reader: Any = None,
    backend: Any = None,
    sub_max_input_tokens: int = READER_TOKENS,
) -> list[Any]:
    """The episodes of `tasks` through the real rollout engine, played by `backend` (the teacher by default)
    with `reader` answering llm() (by default the teacher's reader, shown what a student's reader would be
    within `sub_max_input_tokens`: `ReaderView`): for measuring and testing the teacher."""
    from fathom.policies.readers import ReaderView, teacher_reader
    from fathom.rollout.engine import RolloutConfig
    from fathom.rollout.wiring import build_engine, hf_service

    config = RolloutConfig(
        max_turns=max_turns, max_total_tokens=1 << 20, sub_max_input_tokens=sub_max_input_tokens
    )
    engine = build_engine(
        hf_service(backend or teacher_backend(chat)),
        chat,
        config,
        reader or ReaderView(teacher_reader(), chat, config.sub_max_input_tokens),
    )
    return engine.run_sync(tasks)
