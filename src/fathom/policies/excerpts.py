"""The teacher's reading moves for documents it cannot keep whole: cut an excerpt, have `llm()` read it,
and combine the replies in code.

`cut_cell` writes one cell that keeps the lines the question points at (the hit lines of its key terms, their
paragraph when it is short (else the paragraph's first line: a table's header, a block's title), a few
neighbours when the question asks what comes before or after, the identifiers those lines name, the document's
heading lines, or whole sections under a heading that names a key) and prints how much it kept; `read_cell`
cuts what was kept into chunks under `CHUNK_CHARS` (or the size the teacher is given) on line boundaries and
asks `llm_batch` the question once per chunk. Every cell defines the helpers it calls (`paragraph`, the
chunking) itself, rather than reusing an earlier cell's: a student that skips or splices cells then still runs
what it wrote (bench/RESULTS.md, "After run 8"). Each cell fits the 384 new tokens a turn the student
generates under in the GPU proof (Qwen2.5 tokens; `fathom.train.sft` trains no transcript with a longer turn).
When a follow cut finds nothing, `defined_cells` keeps the hits again with, for each name they use, only the
line where it is defined (the one line unlike its other mentions: a sender's directory row among the headers
of its messages). With no key terms every line is kept: a map over the whole document.
`combine` writes the cell that reduces the printed replies as the question asks (a count adds up, a
yes/no question is yes if any chunk says so, a list is the union, a least/greatest value is the min/max,
anything else is the reply most chunks agree on).

Every literal these cells use comes from the question or an earlier printout (heading prefixes are taken
from the lines the look move printed). This module only writes text; `fathom.policies.teacher` decides
which excerpt to try, and reads the replies back with `parse_replies`.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass

from fathom.policies.looking import Question
from fathom.policies.moves import MISSING, NOT_THERE, READ_MARK, asked_about, named, prose, turn
from fathom.rollout.engine import chunk_chars

# The reader view the teacher's chunks are cut for (the GPU proof's Qwen student's, in tokens), and what that
# view holds whole of dense text: a longer chunk would be cut before the student's reader reads it
# (bench/RESULTS.md "The reader's view")
READER_TOKENS = 4096
CHUNK_CHARS = chunk_chars(READER_TOKENS)  # 7,680
NEIGHBOUR_WORDS = ("after", "before", "next", "previous", "preced", "follow", "earlier", "later")
COUNT_WORDS = r"^count\b|\bcount (?:the|how|all|every)\b|\bnumber of\b|\bhow many\b"
OFTEN_MAX = 2000  # past this many uses, finding a name's odd line costs more than it may find
# A cell longer than this may not fit the 384 new tokens a student generates a turn under in the GPU proof
# (rollout.max_new_tokens; this code is about 3 characters a Qwen2.5 token), with room to spare
TURN_CHARS = 1000
ODD_MAX = 3  # more lines than this unlike a name's other mentions: it has no one defining line
REPLIES = re.compile(r"^replies: (\[.*\])$", re.M)
# How a read cell asks llm() about a chunk. Each names the reply for a chunk without the answer, so a later
# cell may drop such replies by that phrase (`fathom.policies.grounding`: the policy knows what it asked for).
READ_ASKS = (
    f"Answer the question from the text below alone; reply with the answer only, or {NOT_THERE}.",
    f"Using only these lines, give the exact answer to the question (the answer only), or {NOT_THERE}.",
    f"Read this part of a document and answer the question exactly, or {NOT_THERE}; nothing else.",
)


@dataclass(frozen=True)
class Cut:
    """How one excerpt is cut: which lines are kept around the key terms."""

    keys: tuple[str, ...]  # lowercased; empty = every line
    context: int = 0  # neighbour lines kept around each hit
    paragraph: int = 0  # keep a hit's whole paragraph when it has at most this many lines
    follow: bool = False  # also keep the lines of rare identifiers the kept lines name
    headings: tuple[str, ...] = ()  # prefixes of heading lines that are always kept
    sections: bool = False  # keep whole sections (heading to heading) that mention a key
    scope: tuple[str, ...] = ()  # the keys name headings with these prefixes: keep their sections (each to
    # the next line with its prefix) instead of paragraphs, so a named heading brings the text it heads


def needs_neighbours(q: Question) -> bool:
    lower = q.text.lower()
    return any(re.search(rf"\b{w}", lower) for w in NEIGHBOUR_WORDS)


def _searched(keys: tuple[str, ...]) -> list[str]:
    """The keys to search for: a phrase is left out when a shorter key is part of it (its lines are among
    that key's hits), so the cell lists fewer literals and keeps the same lines. A name (no space) stays:
    `low` also says which identifiers are keys, not names to follow."""
    low = [k.lower() for k in keys]
    inside = [any(len(b) < len(a) and b in a for b in low) for a in low]
    return [k for k, part in zip(keys, inside, strict=True) if " " not in k or not part]


def _keep_code(cut: Cut) -> str:
    if not cut.keys:
        return "keep = {i for i, line in enumerate(lines)}"
    code = f"""low = [k.lower() for k in {_searched(cut.keys)!r}]
hit = [i for i, line in enumerate(lines) if any(k in line.lower() for k in low)]"""
    if cut.headings:
        # the prefixes named on a line of their own: `startswith((...))` inside the comprehension closes three
        # brackets in a row after a literal, a run that small students copy one bracket short
        code += f"""
prefixes = {cut.headings!r}
heads = [i for i, line in enumerate(lines) if line.startswith(prefixes) and len(line) < 100]"""
    if cut.sections:
        code += """
keep = set(heads)
starts = [*heads, len(lines)]
for a, b in zip(starts, starts[1:]):
    if any(a <= i < b for i in hit):
        keep.update(range(a, b))"""
        return code
    if cut.scope:
        return code + _scope_code(cut)
    if cut.paragraph or cut.follow:
        code += "\n" + _paragraph_def(max(cut.paragraph, 1))
    c = cut.context  # each hit with its `c` neighbours and its paragraph
    around = [f"range(max(0, i - {c}), min(len(lines), i + {c + 1}))"] if c else []
    around += ["paragraph(i)"] if cut.paragraph else []
    if not around:
        spread = "set(hit)"
    elif len(around) == 1:
        spread = f"{{j for i in hit for j in {around[0]}}}"
    else:
        spread = f"{{j for i in hit for j in [*{around[0]}, *{around[1]}]}}"
    code += f"\nkeep = {_with_heads(cut)}{spread}"
    if cut.follow:
        code += _follow_code("paragraph")
    return code


def _paragraph_def(most: int) -> str:
    """`paragraph(i)`: line i's paragraph; in a block longer than `most` lines, the block's first line (a
    table's header) and the line."""
    return f"""def paragraph(i):
    a = b = i
    while a > 0 and lines[a - 1].strip():
        a -= 1
    while b + 1 < len(lines) and lines[b + 1].strip():
        b += 1
    return range(a, b + 1) if b - a < {most} else (a, i)"""


def _with_heads(cut: Cut) -> str:
    return "set(heads) | " if cut.headings else ""


def _scope_code(cut: Cut) -> str:
    """The keys name headings: keep each named heading's section and, with `follow`, the sections of the
    headings the kept lines name (a parent, a part referred to). Other lines that name them are left out:
    a reader would take them for part of the section they land after."""
    # a heading's section runs to the next heading of its kind, which is kept (it shows where it ends)
    code = f"""
def section(i):
    head = [p for p in {cut.scope!r} if lines[i].startswith(p) and len(lines[i]) < 100]
    b = i + 1
    while head and b < len(lines) and not lines[b].startswith(head[0]):
        b += 1
    return range(i, min(b + 1, len(lines))) if head else ()
keep = {_with_heads(cut)}{{j for i in hit for j in section(i)}}"""
    if cut.follow:
        code += _follow_code("section")
    return code


# Twice: the rare identifiers (5+ characters, a digit or a separator inside, at most 12 uses) that the kept
# lines name, and what EXPAND(i) keeps around each line that uses one.
FOLLOW_CODE = """
for _ in range(2):
    named = {t for i in keep for t in re.findall(r"\\w[\\w.@-]*[\\d.@_-][\\w.@-]*\\w", lines[i])}
    named = {t for t in named if len(t) >= 5 and ctx.count(t) <= 12 and t.lower() not in low}
    for i in [i for i, line in enumerate(lines) if i not in keep and any(t in line for t in named)]:
        keep.update(EXPAND(i))"""


def _follow_code(expand: str) -> str:
    return FOLLOW_CODE.replace("EXPAND", expand)


def cut_cell(rng: random.Random, cut: Cut) -> str:
    """Keep the lines `cut` says and print how many, with a few of them."""
    code = f"""
import re
lines = ctx.splitlines()
{_keep_code(cut)}
kept = sorted(keep)
print(len(kept), "lines kept,", sum(len(lines[i]) + 1 for i in kept), "chars")
for i in kept[:4]:
    print("   ", lines[i][:160])
"""
    if cut.keys and cut.scope:
        thought = (
            "The terms name headings: I keep the section under each, and the sections its lines refer to.",
            "What the question names are headings; the answer is in the text they head, so I keep those sections.",
        )
    elif cut.keys and cut.sections:
        thought = (
            "The headings divide the document into sections; I keep the sections that mention the key terms.",
            "Let me keep whole sections, from a heading to the next, where the key terms occur.",
        )
    elif cut.keys and cut.headings:
        thought = (
            "The answer depends on which part a line belongs to, so I keep the heading lines with the hits.",
            "Keep every heading line as well as the hit lines, so the reader knows where each hit sits.",
        )
    elif cut.keys and cut.context:  # the question asks about a line next to another: the reason is said first
        terms = named(cut.keys, width=20)
        thought = (
            f"Before/after: I keep {terms} hits and {cut.context} lines around.",
            f"Next to a line: {terms} hits, {cut.context} lines each side.",
        )
    elif cut.keys:  # which of the question's terms it keeps: the choice is shown, not only its result
        terms = named(cut.keys, width=20)
        thought = (
            f"The search found {terms}: I keep their lines and what they point to.",
            f"Few lines mention {terms}; I keep those and their context.",
        )
    else:
        thought = (
            "Nothing narrow to search for: the whole document has to be read, in chunks.",
            "The question concerns the whole document; I will have every line read, chunk by chunk.",
        )
    return turn(rng, thought, code)


def defined_cells(
    rng: random.Random,
    q: Question,
    context: int,
    rare: tuple[str, ...] = (),
    chunk_size: int = CHUNK_CHARS,
) -> list[str]:
    """After a follow cut (it leaves `lines`, `hit` and `low`) found nothing: keep the hits again (with
    `context` neighbours and their paragraphs; only those of the `rare` keys when given: a key found far more
    often than another is vocabulary) and, instead of every line each name in them reaches, only where the
    name is defined: the line that mentions it unlike its other lines (an address's directory row among the
    From: and To: lines of its messages), when at most `ODD_MAX` lines are odd that way; then read those
    lines (`read_cell`), in the same cell (one turn) unless that cell would be longer than `TURN_CHARS`:
    then in a second one. The cell defines `paragraph` again rather than call the cut cell's."""
    code = "\nimport re"
    if rare:
        code += f"""
hit = [i for i, line in enumerate(lines) if any(k.lower() in line.lower() for k in {_searched(rare)!r})]"""
    near = f"*range(max(0, i - {context}), min(len(lines), i + {context + 1})), " if context else ""
    code += f"""
{_paragraph_def(30)}
keep = {{j for i in hit for j in [{near}*paragraph(i)]}}
names = {{t for i in keep for t in re.findall(r"\\w[\\w.@-]*[\\d.@_-][\\w.@-]*\\w", lines[i])}}
names = {{t for t in names if len(t) >= 5 and t.lower() not in low and ctx.count(t) <= {OFTEN_MAX}}}
for t in sorted(names):
    at = [i for i, line in enumerate(lines) if t in line]
    shape = [lines[i].split()[0] for i in at]
    odd = [i for i, s in zip(at, shape) if shape.count(s) == 1]
    if len(odd) <= {ODD_MAX}:
        keep.update(j for i in odd for j in paragraph(i))
kept = sorted(keep)
print(len(names), "names;", len(kept), "lines kept")
"""
    thoughts = (
        "Nothing found. I keep the hits and, for each name in them, only the line unlike its other mentions.",
        "Not found. A name is defined once, in a line unlike its other mentions: I keep the hits and those.",
    )
    read = _read_code(rng, q, chunk_size)
    if len(code + read) <= TURN_CHARS:
        return [turn(rng, thoughts, code + read)]
    return [turn(rng, thoughts, code), read_cell(rng, q, chunk_size)]


def _read_code(rng: random.Random, q: Question, chunk_size: int) -> str:
    """The kept lines in chunks of at most `chunk_size`, the question asked of each by `llm_batch`; prints the
    replies."""
    ask = rng.choice(READ_ASKS)
    return f"""
chunks = [""]
for n, i in enumerate(kept):
    # a new chunk when full, or at a blank line once three-quarters full, so paragraphs stay whole
    if chunks[-1] and (len(chunks[-1]) + len(lines[i]) > {chunk_size} or len(chunks[-1]) > {chunk_size * 3 // 4} and not lines[i].strip()):
        chunks.append("")
    if n and i - 1 != kept[n - 1]:
        chunks[-1] += "\\n"  # a gap in the document stays a blank line
    chunks[-1] += lines[i] + "\\n"
ask = {prose(ask + chr(10) + READ_MARK + q.text)}
replies = llm_batch([(ask, chunk) for chunk in chunks])
print(len(chunks), "chunks read")
print("replies:", [r.strip()[:200] for r in replies])
"""


def read_cell(rng: random.Random, q: Question, chunk_size: int = CHUNK_CHARS) -> str:
    """Chunk the kept lines under `chunk_size` (by default what the student's reader view holds whole) and ask
    the question of each; prints ``replies: [...]``."""
    return turn(
        rng,
        (
            "What I kept is small enough to read in a few chunks; llm() answers the question on each.",
            "Now llm() reads the kept lines, chunk by chunk, with the question.",
            "Delegate the reading: each chunk of the kept lines goes to llm() with the question.",
        ),
        _read_code(rng, q, chunk_size),
    )


def parse_replies(observation: str) -> list[str] | None:
    """The replies an `excerpt` cell printed, or None when it printed none."""
    m = REPLIES.search(observation)
    if m is None:
        return None
    try:
        replies = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    return [str(r) for r in replies]


def useful(q: Question, replies: list[str]) -> list[str]:
    """The replies that are an answer: not empty and not the reader's way of saying it is not there (unless
    the question offers "not found" as an answer)."""
    offered = MISSING in q.text.lower()
    return [r for r in replies if r.strip() and (offered or MISSING not in r.lower())]


def _kind(q: Question, answers: list[str]) -> str:
    lower = q.text.lower()
    numbers = all(re.fullmatch(r"-?\d+(\.\d+)?", a) for a in answers)
    if q.count or re.search(COUNT_WORDS, lower):
        return "sum" if numbers else "first"
    if {a.lower() for a in answers} <= {"yes", "no"}:
        return "any"
    if numbers and re.search(r"\b(least|lowest|smallest|minimum|min|earliest|fewest)\b", lower):
        return "min"
    if numbers and re.search(r"\b(most|highest|largest|greatest|maximum|max|top|latest)\b", lower):
        return "max"
    if len(answers) > 1 and (q.listing or any("," in a for a in answers)):
        return "union"
    return "first"


def combine(rng: random.Random, q: Question, answers: list[str], replies: int) -> str:
    """FINAL the replies reduced as the question asks (see the module docstring). The cell itself drops the
    replies that say the chunk lacks the answer, and (unless the answer is a count) those that only repeat a
    name the question asks about (`moves.asked_about`), and FINALs only when some reply is left: the same
    cell, copied where every reply was one of those, submits nothing (unless the question offers "not found"
    as an answer). The teacher writes it only when some reply would be left (`teacher._answer`).
    Its thought opens with how many of the `replies` printed answer: the move follows from that printout."""
    kind = _kind(q, answers)
    echoes = asked_about(q) if kind != "sum" else []
    test, named_line = "r.strip()", ""
    if MISSING not in q.text.lower():  # unless the question offers "not found" as an answer
        test += f" and {MISSING!r} not in r.lower()"
    if echoes:  # a reply that is a name the question gave answers nothing: the cell drops it itself
        named_line = f"named = [n.lower() for n in {echoes!r}]\n"
        test += " and r.strip().lower() not in named"
    keep = f"{named_line}answers = [r.strip() for r in replies if {test}]"
    final = {
        "sum": "FINAL(sum(int(a) for a in answers))",
        "any": 'FINAL("yes" if any(a.lower() == "yes" for a in answers) else "no")',
        "min": "FINAL(min(answers, key=float))",
        "max": "FINAL(max(answers, key=float))",
        "union": 'FINAL(sorted({p.strip() for a in answers for p in a.split(",") if p.strip()}))',
        "first": "from collections import Counter\nFINAL(Counter(answers).most_common(1)[0][0])",
    }[kind]
    thoughts = {
        "sum": ("Each chunk counted its own part; the total is their sum.", "Add up the per-chunk counts."),
        "any": ("It is yes if any part says yes.", "One yes among the chunks settles it."),
        "min": ("The least value overall is the least of the per-chunk answers.",),
        "max": ("The greatest value overall is the greatest of the per-chunk answers.",),
        "union": ("The answer is a set: I take the union of what the chunks found.",),
        "first": ("The reader found an answer; I submit the one the chunks agree on.",),
    }[kind]
    left = [a for a in answers if a.strip().lower() not in {e.lower() for e in echoes}]
    seen = f"Replies with an answer: {len(left)} of {replies}."
    final = final.replace("\n", "\n    ")
    return turn(
        rng, tuple(f"{seen} {t}" for t in thoughts), f"{keep}\nprint(answers)\nif answers:\n    {final}"
    )
