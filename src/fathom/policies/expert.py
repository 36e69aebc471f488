"""The expert: a scripted policy that solves every task family the way a good RLM would.

It looks first (a grep that shows the needle format and how many hits there are), then computes the answer
in code, and delegates to `llm()` only where reading is needed: classifying OOLONG records, which no regex
can label, and following a bAbI story once the code has cut it down to its facts. Its turns are plain text
with ```repl blocks, sent through the same `step` interface as any model, so its transcripts are SFT data
and its score is the upper-bound baseline.

`fathom.policies.readers.expert_reader()` is the sub-LM that stands in for a competent reader on those
calls; it reads with the task layer's own `label_of` / `babi.solve`, so an expert episode tests the
scaffold, not a model.

This module writes code strings; it imports nothing into the sandbox (the REPL has only the stdlib).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fathom.tasks import keychain, multikey, niah, oolong, pairs, records, vartrack, words
from fathom.tasks.family import question_slots

CLASSIFY_PROMPT = (
    "Classify each line below (one question per line) into exactly one category: "
    + ", ".join(records.LABELS)
    + ". Reply with one category per line, in order, and nothing else."
)
STORY_PROMPT = "Read the story facts below and answer the question. Question: "
CHUNK_CHARS = 12_000


def _repl(code: str, thought: str) -> str:
    return f"{thought}\n```repl\n{code.strip()}\n```"


def _look(pattern: str, what: str) -> str:
    code = f"""
import re
hits = re.findall({pattern!r}, ctx, re.M)
print(len(ctx), "chars;", len(hits), "{what}")
print(hits[:3])
"""
    return _repl(code, f"I will find the {what} with a regex before reading anything.")


def _niah(task: Any, turn: int) -> str:
    if turn == 0:
        return _look(niah.NEEDLE_RE.pattern, "needles")
    key = niah.QUESTION_RE.search(task.question).group(1)  # type: ignore[union-attr]
    code = f"""
values = [v for k, v in re.findall({niah.NEEDLE_RE.pattern!r}, ctx) if k == {key!r}]
print(values)
FINAL(values[0])
"""
    return _repl(code, f"The asked key is {key}; only its exact needle counts.")


def _multikey(task: Any, turn: int) -> str:
    if turn == 0:
        return _look(niah.NEEDLE_RE.pattern, "needles")
    asked = sorted(set(multikey.KEYS_RE.findall(multikey.QUESTION_RE.search(task.question).group(1))))  # type: ignore[union-attr]
    code = f"""
asked = {asked!r}
values = sorted(v for k, v in re.findall({niah.NEEDLE_RE.pattern!r}, ctx) if k in asked)
print(values)
FINAL(values)
"""
    return _repl(code, "Every value of every asked key, and nothing else.")


def _vartrack(task: Any, turn: int) -> str:
    if turn == 0:
        return _look(vartrack.STATEMENT_RE.pattern, "assignments")
    value = vartrack.QUESTION_RE.search(task.question).group(1)  # type: ignore[union-attr]
    code = f"""
resolved = {{}}
for name, number, ref in re.findall({vartrack.STATEMENT_RE.pattern!r}, ctx, re.M):
    resolved[name] = number or resolved.get(ref)
names = sorted(n for n, v in resolved.items() if v == {value!r})
print(names)
FINAL(names)
"""
    return _repl(code, "Resolve each assignment in document order, then keep the names with the value.")


def _keychain(task: Any, turn: int) -> str:
    if turn == 0:
        return _look(keychain.LINK_RE.pattern, "drawer links")
    key = question_slots(keychain.QUESTION_RE, task.question)["key"]
    code = f"""
drawers = {{k: (nxt, code) for k, nxt, code in re.findall({keychain.LINK_RE.pattern!r}, ctx)}}
key, code = {key!r}, ""
while not code:
    key, code = drawers[key]
print(code)
FINAL(code)
"""
    return _repl(code, "Follow the drawers from the given key until one holds a code.")


def _records_turn() -> str:
    code = f"""
import re
recs = re.findall({records.RECORD_RE.pattern!r}, ctx, re.M)
chunks, size = [[]], 0
for rec in recs:
    if size > {CHUNK_CHARS}:
        chunks.append([])
        size = 0
    chunks[-1].append(rec)
    size += len(rec[2])
replies = llm_batch([({CLASSIFY_PROMPT!r}, "\\n".join(r[2] for r in chunk)) for chunk in chunks])
labels = [line.strip() for reply in replies for line in reply.strip().splitlines()]
print(len(recs), "records,", len(labels), "labels,", len(chunks), "llm calls")
"""
    return _repl(
        code, "Labels cannot be grepped: parse the records, then have llm() read them in large chunks."
    )


def _oolong(task: Any, turn: int) -> str:
    if turn == 0:
        return _look(records.RECORD_RE.pattern, "records")
    if turn == 1:
        return _records_turn()
    kind, x, y, _ = oolong.parse_question(task.question)
    if kind == "count":
        code = f"FINAL(sum(label == {x!r} for label in labels))"
    elif kind == "count_after":
        date = question_slots(oolong.QUESTION_RES[kind], task.question)["date"]
        code = f"""
from datetime import datetime
cutoff = datetime.strptime({date!r}, "%b %d, %Y")
FINAL(sum(label == {x!r} and datetime.strptime(rec[0], "%b %d, %Y") > cutoff
          for rec, label in zip(recs, labels)))
"""
    elif kind in ("most", "least"):
        pick = "max" if kind == "most" else "min"
        code = f"""
from collections import Counter
counts = Counter(labels)
print(counts)
FINAL({pick}({list(records.LABELS)!r}, key=lambda label: counts[label]))
"""
    else:
        code = f"""
nx, ny = labels.count({x!r}), labels.count({y!r})
print(nx, ny)
FINAL("more common" if nx > ny else "less common" if nx < ny else "same frequency")
"""
    return _repl(code, "Aggregate the labels in code.")


def _pairs(task: Any, turn: int) -> str:
    if turn == 0:
        return _look(records.RECORD_RE.pattern, "records")
    if turn == 1:
        return _records_turn()
    predicate, a, b = pairs.parse_question(task.question)
    first, second = {"any": ("na + nb >= 1", "na + nb >= 1"), "both": ("na >= 1 and nb >= 1",) * 2}.get(
        predicate, ("na >= 2", "nb >= 1")
    )
    code = f"""
tally = {{}}
for rec, label in zip(recs, labels):
    t = tally.setdefault(int(rec[1]), [0, 0])
    t[0] += label == {a!r}
    t[1] += label == {b!r}
can1 = {{u for u, (na, nb) in tally.items() if {first}}}
can2 = {{u for u, (na, nb) in tally.items() if {second}}}
found = sorted({{(min(u, v), max(u, v)) for u in can1 for v in can2 if u != v}})
print(len(found), found[:5])
FINAL([list(p) for p in found])
"""
    return _repl(code, "Count each user's instances of the two categories, then enumerate qualifying pairs.")


def _story_pattern() -> str:
    """A short regex for story facts: a capitalised name, one of the story's verbs, "the", a word.

    A model would write this, not an alternation of every name and place; prose lines it lets through
    are harmless, because the reader follows only the facts."""
    verbs = "|".join(sorted({*words.MOVE_VERBS, *words.TAKE_VERBS, *words.DROP_VERBS}, key=len, reverse=True))
    return rf"^[A-Z][a-z]+ (?:{verbs})(?: to)? the [a-z]+(?: [a-z]+)?\.$"


def _babi(task: Any, turn: int) -> str:
    if turn == 0:
        return _look(_story_pattern(), "story facts")
    code = f"""
facts = [m.group(0) for m in re.finditer({_story_pattern()!r}, ctx, re.M)]
reply = llm({STORY_PROMPT + task.question!r}, "\\n".join(facts))
print(reply)
FINAL(reply.strip())
"""
    return _repl(code, "The facts are few once grepped out; a reader can follow the story.")


EXPERTS: dict[str, Callable[[Any, int], str]] = {
    "niah": _niah,
    "multikey": _multikey,
    "vartrack": _vartrack,
    "keychain": _keychain,
    "oolong": _oolong,
    "pairs": _pairs,
    "babi": _babi,
}


def expert_turn(task: Any, turn: int) -> str:
    """The expert's text for `turn` (0-based) of an episode on `task`."""
    if task.family not in EXPERTS:
        raise ValueError(f"no expert for family {task.family!r}; known: {', '.join(EXPERTS)}")
    return EXPERTS[task.family](task, turn)
