"""Glossaries of made-up terms: find a term by its definition or its neighbour (`glossary_lookup`), and
say which words have an entry (`glossary_defined`, existence).

A document is a glossary: a title, then entries in alphabetical order under letter headings, one entry
per line in one of `STYLES` (chosen by the seed; the "indent" style puts the definition on the next,
indented line), with headwords in one casing (lower, Capitalised or UPPER)::

    **quastrel** (n.) — And God called the light Day, and the darkness he called Night.
    Quastrel: And God called the light Day ...        QUASTREL
    - quastrel — And God called ...                       And God called the light Day ...

Headwords are pronounceable pseudo-words (`prose.pseudo_word`) that never occur in the definitions'
corpus window, so no model can recall them; definitions are prose cut from one corpus. Some definitions
end with "See also: TERM." (another headword) or "Compare WORD." (a word that is not a headword).

glossary_lookup asks which term a quoted definition belongs to (the quote occurs once), or which entry
comes right before or after a given term. glossary_defined asks which of eight to thirteen words have an
entry of their own: one to three headwords among seven to ten near misses ("Compare" words, one-letter
variants of headwords, unseen words), written "a / b / c". Gold: a headword as written (``exact``) or
a sorted list (``set_f1``; every glossary_defined question is a list, so a yes / no never fits).

For an expert: `parse_entries(document)` gives (headword, definition) in order. Difficulty: easy has
no cross-references; medium and hard add "See also" / "Compare" lines (hard: in a third of entries) and
hard asks about look-alike words more often.

This module does not write manuals with options (see `fathom.tasks.manual`).
"""

from __future__ import annotations

import random
import re

from fathom.tasks import prose
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.haystack import Corpora
from fathom.tasks.prose import QUOTE, Budget, Phrasings, Snippets
from fathom.tasks.schema import Task

STYLES = {
    "bold": ("**{term}** ({pos}) — {text}", r"^\*\*(?P<term>[A-Za-z]+)\*\* \([a-z.]+\) — (?P<text>.*)$"),
    "colon": ("{term}: {text}", r"^(?P<term>[A-Za-z]+): (?P<text>.*)$"),
    "indent": ("{term}\n    {text}", r"^(?P<term>[A-Za-z]+)\n    (?P<text>.*)$"),
    "comma": ("{term}, {pos} {text}", r"^(?P<term>[A-Za-z]+), (?:n|v|adj|adv)\. (?P<text>.*)$"),
    "dash": ("- {term} — {text}", r"^- (?P<term>[A-Za-z]+) — (?P<text>.*)$"),
}
STYLE_RES = {k: re.compile(r, re.MULTILINE) for k, (_, r) in STYLES.items()}
HEADINGS = ("## {L}", "— {L} —", "[{L}]")
TITLES = ("Glossary", "# Glossary of terms", "A SHORT DICTIONARY OF THE TRADE", "Lexicon (alphabetical)")
POS = ("n.", "v.", "adj.", "adv.")
CASINGS = (str.lower, str.capitalize, str.upper)
# difficulty -> (share of entries with a cross-reference line, share of look-alike words asked)
LEVELS = {"easy": (0.0, 0.3), "medium": (0.15, 0.5), "hard": (0.33, 0.7)}
TERM = "[A-Za-z]+"
_ANS = (" Answer with the term only.", " Give the headword.", "")
LOOKUP_QUESTIONS = {
    "reverse": Phrasings(
        tuple(
            t + a
            for t in (
                'Which term does the glossary define with the words "{quote}"?',
                "In the glossary, whose definition contains “{quote}”?",
                'Find the entry whose definition includes "{quote}". What is its headword?',
                'Which headword is explained as "... {quote} ..."?',
                "The phrase “{quote}” appears in one definition. Which term is being defined?",
            )
            for a in _ANS
        ),
        {"quote": QUOTE},
    ),
    "after": Phrasings(
        tuple(
            t + a
            for t in (
                "Which entry comes right after {term} in the glossary?",
                "What is the next headword after '{term}'?",
                "In the glossary's order, which term immediately follows {term}?",
                "Which term is defined directly below the entry for {term}?",
                "Name the entry that follows '{term}'.",
            )
            for a in _ANS
        ),
        {"term": TERM},
    ),
    "before": Phrasings(
        tuple(
            t + a
            for t in (
                "Which entry comes right before {term} in the glossary?",
                "What is the headword just before '{term}'?",
                "In the glossary's order, which term immediately precedes {term}?",
                "Which term is defined directly above the entry for {term}?",
                "Name the entry that precedes '{term}'.",
            )
            for a in _ANS
        ),
        {"term": TERM},
    ),
}
# Candidates are separated by " / ", not commas, so the question text read as a list is one item.
_WORDS = r"[A-Za-z]+(?: / [A-Za-z]+)*"
DEFINED_QUESTIONS = {
    "which": Phrasings(
        (
            "Which of these words have their own entry in the glossary: {words}? List only those that do.",
            "Of the words {words} which are headwords of the glossary? List them.",
            "The glossary defines some of these: {words}. Which ones? List them.",
            "Check each of {words}: which have an entry in the glossary (not just a mention)?",
            "List the words among {words} that the glossary defines as entries.",
        ),
        {"words": _WORDS},
    ),
}


def build(rng: random.Random, corpora: Corpora, length_tokens: int, difficulty: str) -> tuple[str, dict]:
    cross, _ = LEVELS[difficulty]
    source = prose.prose_source(rng, corpora, int(length_tokens * 3.6))
    budget = Budget(source)
    snippets = Snippets(corpora, rng, source, int(length_tokens * 3.6) + 4000)
    corpus_words = set(re.findall(r"[a-z]+", snippets.text.lower()))
    style = rng.choice(sorted(STYLES))
    case = rng.choice(CASINGS)
    heading = rng.choice(HEADINGS)
    n = 12 + length_tokens // 40  # more than fit: an entry is about 55 tokens, the budget stops early
    taken = set(corpus_words)
    terms = sorted(prose.pseudo_words(rng, n, taken))
    mentioned = prose.pseudo_words(rng, max(3, n // 20), taken)  # "Compare" words: never headwords
    lines = [budget.struct(rng.choice(TITLES))]
    letter = ""
    written: list[str] = []
    used_mentions: set[str] = set()
    for term in terms:
        if budget.tokens >= length_tokens - 20 and len(written) >= 12:
            break
        if term[0] != letter:
            letter = term[0]
            lines += ["", budget.struct(heading.format(L=letter.upper())), ""]
        text = snippets.next(60, 350)
        roll = rng.random()
        if roll < cross / 2:
            text += f" See also: {case(rng.choice(terms))}."
        elif roll < cross:
            compared = case(rng.choice(mentioned))
            used_mentions.add(compared)
            text += f" Compare {compared}."
        entry = STYLES[style][0].format(term=case(term), pos=rng.choice(POS), text="")
        lines.append(budget.struct(entry) + budget.prose(text))
        written.append(term)
    info = {"terms": [case(t) for t in written], "mentioned": sorted(used_mentions), "taken": taken}
    return "\n".join(lines), info


def parse_entries(document: str) -> list[tuple[str, str]]:
    """(headword, definition) of every entry, in order, in whichever style reads the most entries."""
    best = max(STYLE_RES.values(), key=lambda r: len(r.findall(document)))
    return [(m["term"], m["text"]) for m in best.finditer(document)]


def _lookup(kind: str, slots: dict[str, str], entries: list[tuple[str, str]]) -> str:
    if kind == "reverse":
        return find_one([t for t, text in entries if slots["quote"] in text], "definition with the quote")
    terms = [t for t, _ in entries]
    i = find_one([i for i, t in enumerate(terms) if t.lower() == slots["term"].lower()], "entry")
    j = i + 1 if kind == "after" else i - 1
    if not 0 <= j < len(terms):
        raise InvalidTaskError("no neighbouring entry")
    return terms[j]


def generate_lookup(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"glossary_lookup/{seed}")
    document, _ = build(rng, corpora, length_tokens, difficulty)
    entries = parse_entries(document)
    kind = rng.choice(tuple(LOOKUP_QUESTIONS))
    slots: dict[str, str] = {}
    if kind == "reverse":
        for _ in range(50):
            quote = prose.unique_quote(rng, rng.choice(entries)[1], document, words=6)
            if quote is not None:
                slots["quote"] = quote
                break
        else:
            raise InvalidTaskError("no unique quote")
    else:
        i = rng.randrange(1, len(entries) - 1)
        slots["term"] = entries[i][0]
    question = LOOKUP_QUESTIONS[kind].write(rng, **slots)
    gold = _lookup(kind, slots, entries)
    meta = {"kind": kind, "entries": len(entries)}
    return make_task(
        "glossary_lookup", seed, length_tokens, difficulty, question, gold, "exact", document, meta
    )


def solve_lookup(question: str, document: str) -> str:
    kind, slots = prose.parse_kind(LOOKUP_QUESTIONS, question)
    return _lookup(kind, slots, parse_entries(document))


def wrong_lookup(task: Task, document: str) -> list[str]:
    terms = [t for t, _ in parse_entries(document)]
    i = terms.index(str(task.answer))
    return [t for t in terms[max(0, i - 2) : i + 3] if t != task.answer] + [""]


def _variant(rng: random.Random, word: str, taken: set[str]) -> str:
    """A one-letter change of `word` that is no headword and no word of the corpus window."""
    for _ in range(100):
        i = rng.randrange(1, len(word))
        letter = rng.choice("aeiounrst")
        new = word[:i] + (letter.upper() if word.isupper() else letter) + word[i + 1 :]
        if new.lower() not in taken:
            return new
    raise InvalidTaskError(f"no look-alike of {word}")


def _defined(slots: dict[str, str], entries: list[tuple[str, str]]) -> list[str]:
    heads = {t.lower(): t for t, _ in entries}
    return sorted(heads[w.lower()] for w in slots["words"].split(" / ") if w.lower() in heads)


def generate_defined(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"glossary_defined/{seed}")
    _, alike = LEVELS[difficulty]
    document, info = build(rng, corpora, length_tokens, difficulty)
    terms, taken = info["terms"], info["taken"]
    mentioned = info["mentioned"]  # "Compare" words written in the document

    def miss() -> str:
        if mentioned and rng.random() < 0.5:
            return rng.choice(mentioned)
        if rng.random() < alike:
            return _variant(rng, rng.choice(terms), taken)
        return prose.pseudo_words(rng, 1, taken)[0]  # adds the word to `taken`: it stays unique

    # One to three headwords among seven to ten near misses: copying every candidate is far from right.
    real = rng.sample(terms, rng.randint(1, 3))
    words = list(dict.fromkeys(real + [miss() for _ in range(rng.randint(7, 10))]))
    rng.shuffle(words)
    slots = {"words": " / ".join(words)}
    question = DEFINED_QUESTIONS["which"].write(rng, **slots)
    gold = _defined(slots, parse_entries(document))
    meta = {"kind": "which", "entries": len(terms)}
    return make_task(
        "glossary_defined", seed, length_tokens, difficulty, question, gold, "set_f1", document, meta
    )


def solve_defined(question: str, document: str) -> list[str]:
    _, slots = prose.parse_kind(DEFINED_QUESTIONS, question)
    return _defined(slots, parse_entries(document))


def wrong_defined(task: Task, document: str) -> list:
    _, slots = prose.parse_kind(DEFINED_QUESTIONS, task.question)
    gold = list(task.answer)  # type: ignore[arg-type]
    asked = slots["words"].split(" / ")
    misses = [w for w in asked if w.lower() not in {g.lower() for g in gold}]
    return [gold[:-1], [*gold, misses[0]], asked, misses, []]


LOOKUP = Family(
    "glossary_lookup",
    "the glossary term of a quoted definition, or the entry before/after a term",
    generate_lookup,
    solve_lookup,
    wrong_lookup,
    True,
)
DEFINED = Family(
    "glossary_defined",
    "which words have their own glossary entry",
    generate_defined,
    solve_defined,
    wrong_defined,
    True,
)
FAMILIES = (LOOKUP, DEFINED)
