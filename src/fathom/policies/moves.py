"""The teacher's moves: each writes one turn (a thought and a ```repl cell) from what the teacher knows.

Every literal a move puts in code comes from the question (`Question`) or from an earlier printout
(`Sight`, search hits): the grounding check (`fathom.policies.grounding`) holds the teacher to that. Each
move takes a `random.Random` and picks among equivalent wordings and ways of writing the same step, so
transcripts teach the move rather than one program. Moves print in formats that `fathom.policies.teacher`
parses back (it reads what it printed, as a model would).

This module only writes text; it runs nothing and does not decide which move comes next.
"""

from __future__ import annotations

import random
import re

from fathom.policies.looking import Question

READ_MARK = "Question: "  # the reader finds the question after this, on the prompt's last line
MISSING = "not found"  # the reply a read prompt asks for when the text does not hold the answer
NOT_THERE = f"reply {MISSING} if it is not there"  # how a read prompt asks for it
CLASSIFY_WORDS = "each line"  # with "categor", how the reader knows a classification prompt
ECHO_MARK = "only repeats the question:"  # how the answer cell prints its check
OFFER = re.compile(r"\W{0,2}(?:,|/|,? or|,? and)\W{0,2}")  # what stands between two names offered as choices
CHOICE = r"\W{0,2}(?: / | or )\W{0,2}"  # a name among plain words offered as choices
# A one-word term shaped like an id: a digit, capitals, or a dash between letters in it.
ID_SHAPE = r"\d|^[A-Z][A-Z0-9_]{2,}$|[a-z]-[a-z]"
IDS_FOUND = "ids found:"  # how the search cell prints the found terms shaped like ids


def escape(text: str) -> str:
    """`re.escape` without escaping spaces and other characters a reader need not see escaped."""
    return re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", text)


def prose(text: str) -> str:
    """The literal for prose a cell passes to llm(): triple double quotes whatever quotes the text holds.

    `repr` switches between ' and " with the text's own quotes; a student copying a question into the
    quotes it saw most often ('...') breaks on a question that holds an apostrophe (run 7: every family whose
    questions quote names scored 0-8%). One form that any question fits is what it should learn."""
    if '"""' in text or text.endswith('"') or "\\" in text:
        return repr(text)
    return f'"""{text}"""'


def turn(rng: random.Random, thoughts: tuple[str, ...], code: str) -> str:
    return f"{rng.choice(thoughts)}\n```repl\n{code.strip()}\n```"


def named(terms: list[str] | tuple[str, ...], most: int = 3, width: int = 24) -> str:
    """Terms as a turn's prose names them: quoted, the first `most`, each cut to `width` characters."""
    shown = ", ".join(repr(t if len(t) <= width else t[: width - 3] + "...") for t in terms[:most])
    return shown + (f" and {len(terms) - most} more" if len(terms) > most else "")


def look(rng: random.Random) -> str:
    head = rng.choice((800, 900, 1000))
    n = rng.choice((5, 6, 7))
    width = rng.choice((150, 160, 200))
    if rng.random() < 0.5:
        samples = f"""for i in range(1, {n + 1}):
    at = len(lines) * i // {n + 1}
    print(f"{{at}}: {{lines[at][:{width}]}}")"""
    else:
        samples = f"""import random
filled = [i for i, line in enumerate(lines) if line.strip()]
for at in sorted(random.Random({rng.randrange(100)}).sample(filled, min({n}, len(filled)))):
    print(f"{{at}}: {{lines[at][:{width}]}}")"""
    code = f"""
lines = ctx.splitlines()
print(len(ctx), "chars,", len(lines), "lines")
print("--- head ---")
print(ctx[:{head}])
print("--- samples ---")
{samples}
"""
    return turn(
        rng,
        (
            "First I look at the document: its size, how it begins, and a few lines from across it.",
            "Before searching for anything, let me see what this document looks like.",
            "I will start by printing the length, the head and some sampled lines.",
        ),
        code,
    )


def search(rng: random.Random, terms: list[str]) -> str:
    width = rng.choice((200, 240))
    if rng.random() < 0.5:
        finder = "spots = [m.start() for m in re.finditer(re.escape(term), ctx)]"
    else:
        finder = """spots, at = [], ctx.find(term)
    while at >= 0:
        spots.append(at)
        at = ctx.find(term, at + 1)"""
    # The cell prints which found terms are shaped like ids (one word: a digit, a dash or capitals in it) before the
    # hits, so whether to follow identifiers next is read off the printout, for any question: the teacher
    # decides on that line (`fathom.policies.teacher`), and the student can copy a decision it can see.
    code = f"""
import re
terms = {terms!r}
ids = [t for t in terms if re.fullmatch(r"\\w[\\w.-]*", t) and re.search(r"{ID_SHAPE}", t) and t in ctx]
print("{IDS_FOUND}", ids)
for term in terms:
    {finder}
    print(f"{{term!r}}: {{len(spots)}} hits")
    for at in spots[:{rng.choice((3, 4))}]:
        start, end = ctx.rfind("\\n", 0, at) + 1, ctx.find("\\n", at)
        print("   ", ctx[start : end if end >= 0 else len(ctx)][:{width}])
"""
    return turn(
        rng,
        (
            "Now I search for the terms the question names and print the lines around each hit.",
            "The question names specific terms; let me find where they occur and read their lines.",
            "Search for the question's key terms and show the context of the first hits.",
        ),
        code,
    )


def follow(rng: random.Random, terms: list[str], limit: int) -> str:
    code = f"""
import re
lines = ctx.splitlines()
todo, done, reached = {terms!r}, set(), set()
while todo:
    term = todo.pop()
    if term in done:
        continue
    done.add(term)
    edge = re.compile(r"(?<![\\w-])" + re.escape(term) + r"(?![\\w-])")
    for i, line in enumerate(lines):
        if term in line and edge.search(line) and i not in reached:
            reached.add(i)
            for token in re.findall(r"[\\w-]+", line):
                if re.search(r"\\d|^[A-Z][A-Z0-9_]{{2,}}$|[a-z]-[a-z]", token) and ctx.count(token) <= {limit}:
                    todo.append(token)
reached = sorted(reached)
print(len(reached), "lines reached")
for i in reached[:30]:
    print(lines[i][:200])
"""
    # the thought names what is followed and why it can be (an id: a digit, a dash or capitals in it), so the
    # rule behind the move is shown, not only the move: the student never sees the teacher's parse
    ids = named(terms)
    return turn(
        rng,
        (
            f"Ids found (a digit, dash or capitals): {ids}. I follow the ids on those lines.",
            f"The search printed ids found: {ids} (a digit, dash or capitals); I follow every id their lines reach.",
            f"The question's ids (a digit, dash or capitals) are in the document: {ids}. I follow each new id they reach.",
        ),
        code,
    )


def pick_digits(rng: random.Random, digits: int, many: bool) -> str:
    pattern = rf"(?<!\d)\d{{{digits}}}(?!\d)"
    code = f"""
found = sorted(set(re.findall(r"{pattern}", "\\n".join(lines[i] for i in reached))))
print(found)
"""
    if many:
        code += "FINAL(found)\n"
    else:
        code += "if len(found) == 1:\n    FINAL(found[0])\n"
    return turn(
        rng,
        (
            f"The question wants {digits}-digit values: I take them from the reached lines in code.",
            f"Extract the {digits}-digit numbers from those lines, and answer if they are unambiguous.",
        ),
        code,
    )


def read_lines(rng: random.Random, question: str, source: str) -> str:
    """Delegate reading of a small set of lines (a Python expression, `source`) to llm()."""
    ask = rng.choice(
        (
            f"Read the lines below and answer the question exactly, using only these lines, or {NOT_THERE}.",
            f"Answer the question from these lines alone; reply with the answer only, or {NOT_THERE}.",
            f"Use only the text below. Give the exact answer to the question, or {NOT_THERE}.",
        )
    )
    code = f"""
chunk = {source}
print(len(chunk), "chars to read")
reply = llm({prose(ask + chr(10) + READ_MARK + question)}, chunk)
print(repr(reply))
"""
    return turn(
        rng,
        (
            "These few lines hold the answer; reading them is a job for llm(), with the question.",
            "The relevant lines are small enough to read: I ask llm() about them.",
            "I have cut the document down to what matters; now llm() reads it and answers.",
        ),
        code,
    )


def asked_about(q: Question) -> list[str]:
    """The names the question asks *about* (its identifiers, quoted and snake_case names, proper names):
    a reply that is one of them repeats the question instead of answering it. A name the question offers
    as a choice (``'a' or 'b'``, ``X / Y / Z``, ``A, B and C``) is left out: the answer may be one of those."""
    terms = list(dict.fromkeys([*q.anchors, *q.quoted, *q.snake, *q.names]))
    text = q.text

    def offered(t: str) -> bool:
        for u in terms:
            for a, b in ((t, u), (u, t)):
                at = text.find(a) if u != t else -1
                while at >= 0:
                    to = text.find(b, at + len(a))
                    if to >= 0 and OFFER.fullmatch(text[at + len(a) : to]):
                        return True
                    at = text.find(a, at + 1)
        # a list of plain words with one name among them: "Of the words cat / DOG / bird ..."
        return re.search(rf"\w{CHOICE}{re.escape(t)}|{re.escape(t)}{CHOICE}\w", text) is not None

    return [t for t in terms if not offered(t)]


def answer_reply(rng: random.Random, q: Question) -> str:
    """FINAL the reader's reply in the form the question asks for, after checking in code that it is an
    answer: not the reply the read prompt asked for when the text lacks it, not empty and, unless it is a
    count, not one of the names the question asks about (a reader that finds only the named line tends to
    hand back the name). The cell prints that check; when the reply fails it, the cell does not FINAL. Every
    question but a count gets the checking cell, even one that names nothing (the list is then empty): run
    16's student wrote the unchecked form where the question named an id and submitted the reader's echo."""
    named = asked_about(q)
    if q.listing:
        value = "[part.strip() for part in reply.split(',') if part.strip()]"
        echo = "[part for part in answer if part.lower() in named]"
    elif q.count:
        value, echo = "int(re.search(r'-?\\d+', reply).group(0))", ""
    else:
        value, echo = "reply.strip()", "answer.lower() in named"
    if MISSING not in q.text.lower():  # unless the question offers "not found" as an answer
        empty = "[]" if q.listing else "0" if q.count else '""'  # what `if answer` reads as no answer
        value = f"{value} if {MISSING!r} not in reply.lower() else {empty}"
    if not echo:  # a count: the reply's number is the answer, whatever the question names
        code = f"""
import re
answer = {value}
print(answer)
if answer:
    FINAL(answer)
else:
    print("not an answer; read wider")
"""
        return turn(rng, ("The reply looks like an answer of the asked form; I submit it.",), code)
    code = f"""
import re
answer = {value}
named = [n.lower() for n in {named!r}]
echo = {echo}
print(answer, "| {ECHO_MARK}", echo)
if answer and not echo:
    FINAL(answer)
else:
    print("not an answer: empty, or only what the question names; read wider")
"""
    return turn(
        rng,
        (
            "The reply has the asked form; I check it is not just a name from the question, then submit it.",
            "Before submitting, make sure the reply is not merely what the question itself names.",
            "A reply that repeats the question's own name answers nothing: check that, then submit.",
        ),
        code,
    )


def story_lines(rng: random.Random, stated: int | None, loose: bool) -> str:
    pattern = r"[A-Z][a-z]+(?: [a-z]+)+\." if loose else r"[A-Z][a-z]+(?: [a-z]+)* the [a-z]+(?: [a-z]+)?\."
    check = f'print(len(facts), "story lines; the question says {stated}")' if stated else ""
    check = check or 'print(len(facts), "story lines")'
    code = f"""
import re
facts = [line.strip() for line in ctx.splitlines() if re.fullmatch(r"{pattern}", line.strip())]
{check}
print(facts[:4])
"""
    return turn(
        rng,
        (
            "The hits are short one-line facts. I collect every line of that shape.",
            "The story facts are short sentences on their own lines; gather all lines that look like them.",
        ),
        code,
    )


def records(rng: random.Random, fields: list[str], sep: str, stated: int | None) -> str:
    parts = [escape(f"{name}: ") + "(.*?)" for name in fields]
    pattern = "^" + escape(sep).join(parts)[:-5] + "(.*)$"
    check = (
        f'print(len(recs), "records; the question says {stated}")'
        if stated
        else 'print(len(recs), "records")'
    )
    code = f"""
import re
recs = re.findall(r"{pattern}", ctx, re.M)
{check}
print(recs[:2])
"""
    return turn(
        rng,
        (
            "The document is a list of records with named fields; I parse them all.",
            "Every record line has the same fields; parse the lines into tuples first.",
        ),
        code,
    )


# Records per labelling call. The reply (one label per line) must fit the sub-LM's reply budget
# (`rollout.sub_max_new_tokens`: 128 in GRPO and evaluation) or the labels past the cut misalign with the
# records: a label line costs 2-5 Qwen2.5 tokens ("description and abstract concept\n" is 5), so 24 lines
# take at most 120 with the end-of-turn token. The episode's llm() calls are capped too
# (`SandboxConfig.max_llm_calls`, 200): the cell grows the chunks to stay within CLASSIFY_CALLS calls, which
# leaves the chosen size alone up to 3,800 records (a 128K-token document) and only then outgrows the reply.
CLASSIFY_CHUNKS = (20, 22, 24)
CLASSIFY_CALLS = 190


def classify(rng: random.Random, field_at: int, categories: list[str]) -> str:
    per = rng.choice(CLASSIFY_CHUNKS)
    cats = ", ".join(categories)
    prompt = rng.choice(
        (
            f"Classify each line below into exactly one category: {cats}. "
            "Reply with one category per line, in order, and nothing else.",
            f"For each line below, name its category, one of: {cats}. "
            "One category per line, same order, nothing else.",
        )
    )
    code = f"""
texts = [rec[{field_at}] for rec in recs]
per = max({per}, len(texts) // {CLASSIFY_CALLS} + 1)
chunks = [texts[i : i + per] for i in range(0, len(texts), per)]
replies = llm_batch([({prose(prompt)}, "\\n".join(chunk)) for chunk in chunks])
labels = [line.strip() for reply in replies for line in reply.strip().splitlines()]
from collections import Counter
print(len(labels), "labels for", len(texts), "records")
print(Counter(labels).most_common())
"""
    return turn(
        rng,
        (
            "The category is not written on the lines: it has to be read. llm() labels them in chunks.",
            "No regex can tell the categories apart; I have llm() read the records, many per call.",
        ),
        code,
    )
