"""Bundles of several files concatenated with headers: which file holds a quoted passage
(`bundle_locate`), and which of three files uses a word most often (`bundle_compare`).

A document is a bundle: a line announcing how many files follow, then each file opened by a header in
one of `HEADERS` (chosen by the seed), e.g. ``==> notes/amber-falcon.txt <==`` or
``----- FILE: notes/amber-falcon.txt -----``, and its body: paragraphs of one prose corpus. File paths
are distinct within a bundle and never occur in a body.

bundle_locate asks which file contains a quote of seven words (it occurs once in the bundle); gold: the
path (``exact``). bundle_compare names three files and a word and asks which file uses it most often
(whole word, any case; the largest count is unique and at least 1); gold: the path (``exact``).

For an expert: `parse_bundle(document)` gives (path, body) per file. Difficulty: the number of files per
10K tokens (easy 2, medium 5, hard 10): more, shorter files make the quote's file harder to tell from
its neighbours.

This module does not write threads or tables (see `fathom.tasks.mail`, `fathom.tasks.manual`).
"""

from __future__ import annotations

import random
import re
from collections import Counter

from fathom.tasks import prose
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.haystack import Corpora
from fathom.tasks.prose import QUOTE, Budget, Phrasings, Snippets
from fathom.tasks.schema import Task
from fathom.tasks.words import ADJECTIVES, NOUNS

HEADERS = ("==> {path} <==", "----- FILE: {path} -----", "=== Document {n}: {path} ===")
HEADER_RE = re.compile(
    r"^(?:==> (\S+) <==|----- FILE: (\S+) -----|=== Document \d+: (\S+) ===)$", re.MULTILINE
)
FOLDERS = ("notes", "docs", "drafts", "archive", "letters", "reports")
EXTS = (".txt", ".md", ".rst")
PER_10K = {"easy": 2, "medium": 5, "hard": 10}
PATH = r"[a-z]+/[a-z]+-[a-z]+\.(?:txt|md|rst)"
_ANS = (" Answer with the file's path.", " Give the file name as in its header.", "")
LOCATE_QUESTIONS = {
    "locate": Phrasings(
        tuple(
            t + a
            for t in (
                'Which file of the bundle contains the words "{quote}"?',
                "In which document does the passage “{quote}” appear?",
                'Find the file that includes "{quote}". What is its path?',
                "The bundle holds several files; which one has “{quote}” in it?",
                'Where, by file, does the text "{quote}" occur?',
            )
            for a in _ANS
        ),
        {"quote": QUOTE},
    )
}
_FILES = {"a": PATH, "b": PATH, "c": PATH, "word": "[a-z]+"}
COMPARE_QUESTIONS = {
    "compare": Phrasings(
        tuple(
            t + a
            for t in (
                "Which of the files {a}, {b} and {c} uses the word '{word}' most often (any case)?",
                "Among {a}, {b} and {c}, which file mentions '{word}' the most times, ignoring case?",
                "Count the word '{word}' (whole word, any case) in {a}, {b} and {c}. Which has the most?",
                "Of the documents {a}, {b} and {c}, which contains '{word}' most frequently?",
                "In which of {a}, {b}, {c} does the word '{word}' occur most often (case-insensitive)?",
            )
            for a in _ANS
        ),
        _FILES,
    )
}


def build(rng: random.Random, corpora: Corpora, length_tokens: int, difficulty: str) -> str:
    n_files = max(3, round(PER_10K[difficulty] * length_tokens / 10_000))
    source = prose.prose_source(rng, corpora, int(length_tokens * 4.3))
    budget = Budget(source)
    snippets = Snippets(corpora, rng, source, int(length_tokens * 4.3) + 4000)
    header = rng.choice(HEADERS)
    paths: list[str] = []
    seen: set[str] = set()
    while len(paths) < n_files:
        path = f"{rng.choice(FOLDERS)}/{rng.choice(ADJECTIVES)}-{rng.choice(NOUNS)}{rng.choice(EXTS)}"
        if path not in seen:
            seen.add(path)
            paths.append(path)
    per_file = (length_tokens - 20) / n_files
    parts = [budget.struct(f"Bundle of {n_files} files.")]
    for i, path in enumerate(paths):
        parts.append(budget.struct(header.format(n=i + 1, path=path)))
        goal = per_file * (i + 1)
        while budget.tokens < goal:
            parts.append(budget.prose(snippets.next(200, 900)))
    return "\n\n".join(parts)


def parse_bundle(document: str) -> list[tuple[str, str]]:
    heads = list(HEADER_RE.finditer(document))
    out = []
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(document)
        out.append((next(g for g in head.groups() if g), document[head.end() : end]))
    if len(out) < 3:
        raise InvalidTaskError("a bundle needs at least three files")
    return out


def _word_counts(body: str) -> Counter[str]:
    return Counter(re.findall(r"[a-z]+", body.lower()))


def _answer(kind: str, slots: dict[str, str], files: list[tuple[str, str]]) -> str:
    if kind == "locate":
        return find_one([p for p, body in files if slots["quote"] in body], "file with the quote")
    bodies = dict(files)
    counts = {p: _word_counts(bodies[p])[slots["word"]] for p in (slots["a"], slots["b"], slots["c"])}
    top = max(counts.values())
    return find_one([p for p, c in counts.items() if c == top], "file with the most uses")


def generate_locate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"bundle_locate/{seed}")
    document = build(rng, corpora, length_tokens, difficulty)
    files = parse_bundle(document)
    for _ in range(50):
        quote = prose.unique_quote(rng, rng.choice(files)[1], document)
        if quote is not None:
            break
    else:
        raise InvalidTaskError("no unique quote")
    slots = {"quote": quote}
    question = LOCATE_QUESTIONS["locate"].write(rng, **slots)
    gold = _answer("locate", slots, files)
    meta = {"files": len(files)}
    return make_task(
        "bundle_locate", seed, length_tokens, difficulty, question, gold, "exact", document, meta
    )


def generate_compare(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"bundle_compare/{seed}")
    document = build(rng, corpora, length_tokens, difficulty)
    files = parse_bundle(document)
    for _ in range(50):
        picked = rng.sample(files, 3)
        counts = [_word_counts(body) for _, body in picked]
        words = sorted({w for c in counts for w in c if len(w) >= 4})
        rng.shuffle(words)
        for word in words[:30]:
            row = sorted((c[word] for c in counts), reverse=True)
            if row[0] >= 2 and row[0] > row[1]:
                break
        else:
            continue
        break
    else:
        raise InvalidTaskError("no word with a unique most frequent file")
    slots = {"a": picked[0][0], "b": picked[1][0], "c": picked[2][0], "word": word}
    question = COMPARE_QUESTIONS["compare"].write(rng, **slots)
    gold = _answer("compare", slots, files)
    meta = {"files": len(files)}
    return make_task(
        "bundle_compare", seed, length_tokens, difficulty, question, gold, "exact", document, meta
    )


def solve_locate(question: str, document: str) -> str:
    kind, slots = prose.parse_kind(LOCATE_QUESTIONS, question)
    return _answer(kind, slots, parse_bundle(document))


def solve_compare(question: str, document: str) -> str:
    kind, slots = prose.parse_kind(COMPARE_QUESTIONS, question)
    return _answer(kind, slots, parse_bundle(document))


def wrong_locate(task: Task, document: str) -> list[str]:
    paths = [p for p, _ in parse_bundle(document)]
    i = paths.index(str(task.answer))
    return [p for p in paths[max(0, i - 2) : i + 3] if p != task.answer] + [""]


def wrong_compare(task: Task, document: str) -> list[str]:
    _, slots = prose.parse_kind(COMPARE_QUESTIONS, task.question)
    return [p for p in (slots["a"], slots["b"], slots["c"]) if p != task.answer] + [""]


LOCATE = Family(
    "bundle_locate",
    "which file of a bundle holds a quoted passage",
    generate_locate,
    solve_locate,
    wrong_locate,
    True,
)
COMPARE = Family(
    "bundle_compare",
    "which of three bundled files uses a word most often",
    generate_compare,
    solve_compare,
    wrong_compare,
    True,
)
FAMILIES = (LOCATE, COMPARE)
