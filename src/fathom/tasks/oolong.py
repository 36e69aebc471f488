"""OOLONG-style aggregation: count and compare labels that must be read off every record.

The document is `fathom.tasks.records`: general-knowledge questions, one record per line, each of one of
six categories (`records.LABELS`) that never appear in the instances. Questions (chosen by the seed):

=============  ===========================================================  =========  =================
kind           asks                                                         metric     gold
=============  ===========================================================  =========  =================
count          how many instances are of category X                         numeric    int
count_after    how many instances dated after D are of category X           numeric    int
most / least   which category is the most / least common                    exact      category name
compare        is X more common, less common, or the same frequency as Y    exact      "more common" |
                                                                                       "less common" |
                                                                                       "same frequency"
=============  ===========================================================  =========  =================

Ties never make a question ambiguous: after sampling, records are relabelled (their instance rewritten)
until all six counts differ, so "most" and "least" have one answer; a ``compare`` question that wants
"same frequency" then equalises exactly its two categories.

Difficulty is the skew of the label distribution: easy has wide gaps between counts, hard is near
uniform (a classifier that mislabels a few records flips the answer). For an expert: `QUESTION_RES` parse
the question (kind and arguments, by slot name); `records.RECORD_RE` and `records.label_of` do the rest.

This module does not write records or instances (see `fathom.tasks.records`).
"""

from __future__ import annotations

import bisect
import math
import random
from collections import Counter

from fathom.tasks import records
from fathom.tasks.family import (
    Family,
    InvalidTaskError,
    alternation,
    check_difficulty,
    find_one,
    make_task,
    template_regex,
)
from fathom.tasks.haystack import Corpora, chars_for_tokens
from fathom.tasks.records import LABELS, Record
from fathom.tasks.schema import Task

NAME = "oolong"
KINDS = ("count", "count_after", "most", "least", "compare")
COMPARISONS = ("more common", "less common", "same frequency")
_CATS = "one of: " + ", ".join(LABELS)
_NAME_IT = f"Answer with the category name ({_CATS})."
QUESTIONS = {
    "count": "How many of the questions above are of the category '{x}'? Answer with a number.",
    "count_after": (
        "How many of the questions dated after {date} are of the category '{x}'? Answer with a number."
    ),
    "most": "Which category is the most common among the questions above? " + _NAME_IT,
    "least": "Which category is the least common among the questions above? " + _NAME_IT,
    "compare": (
        "Is the category '{x}' more common, less common, or the same frequency as the category '{y}' "
        "among the questions above? Answer with exactly one of: more common, less common, same frequency."
    ),
}
_SLOTS = {"x": alternation(LABELS), "y": alternation(LABELS), "date": r"[A-Z][a-z]{2} \d{1,2}, \d{4}"}
QUESTION_RES = {kind: template_regex(question, _SLOTS) for kind, question in QUESTIONS.items()}
# Spread of the log-weights of the six labels: larger = more skewed.
SKEW = {"easy": 1.2, "medium": 0.6, "hard": 0.15}
MIN_SHARE = 0.06  # no label rarer than this, so six distinct counts always fit


def label_weights(rng: random.Random, difficulty: str) -> list[float]:
    raw = [math.exp(rng.gauss(0, SKEW[difficulty])) for _ in LABELS]
    total = sum(raw)
    shares = [max(MIN_SHARE, w / total) for w in raw]
    return [s / sum(shares) for s in shares]


def distinct_targets(counts: dict[str, int]) -> dict[str, int]:
    """Pairwise distinct counts, each >= 1, with the same total and the same order as `counts`.

    Walking up from the rarest label, each target is at least one above the previous; the most common
    label takes whatever is left. If that would not keep it on top, the spread is the minimal 1..5.
    """
    order = sorted(LABELS, key=lambda label: (counts[label], label))
    total = sum(counts.values())
    if total < 21:  # 1 + 2 + 3 + 4 + 5 + 6
        raise InvalidTaskError(f"{total} records cannot have six distinct counts: the document is too short")
    target: dict[str, int] = {}
    floor = 0
    for label in order[:-1]:
        floor = target[label] = max(floor + 1, counts[label])
    target[order[-1]] = total - sum(target.values())
    if target[order[-1]] <= floor:
        target = {label: i + 1 for i, label in enumerate(order[:-1])}
        target[order[-1]] = total - sum(target.values())
    return target


def relabel(rng: random.Random, recs: list[Record], target: dict[str, int]) -> list[Record]:
    """Rewrite just enough records (new instance, same date and user) to reach the target counts."""
    counts = Counter(r.label for r in recs)
    surplus = {label: counts[label] - target[label] for label in LABELS}
    need = [label for label in LABELS for _ in range(max(0, -surplus[label]))]
    give = [i for i, r in enumerate(recs) if surplus[r.label] > 0]
    rng.shuffle(give)
    out = list(recs)
    for i in give:
        if not need:
            break
        if surplus[out[i].label] > 0:
            surplus[out[i].label] -= 1
            label = need.pop()
            out[i] = out[i]._replace(label=label, text=records.instance(rng, label))
    return out


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{NAME}/{seed}")  # per-family stream: same seed, unrelated tasks
    kind = rng.choice(KINDS)
    cumulative = []
    acc = 0.0
    for w in label_weights(rng, difficulty):
        acc += w
        cumulative.append(acc)
    n_users = max(8, length_tokens // 256)
    users = rng.sample(range(10_000, 100_000), n_users)

    def make() -> Record:
        label = LABELS[min(len(LABELS) - 1, bisect.bisect(cumulative, rng.random()))]
        return Record(rng.randrange(records.N_DAYS), rng.choice(users), label, records.instance(rng, label))

    # Six distinct counts need 21 records; 30 leaves the sampler room (documents under ~1K tokens grow).
    recs = records.fill(chars_for_tokens(length_tokens, "records") - 700, make, min_records=30)
    counts = Counter(r.label for r in recs)
    target = distinct_targets(counts)
    x, y = rng.sample(LABELS, 2)
    # A third of compare questions want "same frequency": the larger of the two gives its surplus to a third.
    if kind == "compare" and rng.random() < 1 / 3:
        low, high = sorted((x, y), key=target.__getitem__)
        z = next(label for label in LABELS if label not in (x, y))
        target[z] += target[high] - target[low]
        target[high] = target[low]
    recs = relabel(rng, recs, target)
    cutoff = rng.randrange(records.N_DAYS // 4, 3 * records.N_DAYS // 4)
    date = records.date_text(cutoff)
    question = QUESTIONS[kind].format(x=x, y=y, date=date)
    answer = _answer(kind, [(r.day, r.label) for r in recs], x, y, cutoff)
    document = records.document(recs)
    return make_task(
        NAME,
        seed,
        length_tokens,
        difficulty,
        question,
        answer,
        "numeric" if kind.startswith("count") else "exact",
        document,
        {"kind": kind, "records": len(recs)},
    )


def _answer(kind: str, labelled: list[tuple[int, str]], x: str, y: str, cutoff: int) -> str | int:
    counts = Counter(label for _, label in labelled)
    if kind == "count":
        return counts[x]
    if kind == "count_after":
        return sum(1 for day, label in labelled if label == x and day > cutoff)
    if kind in ("most", "least"):
        extreme = max(counts.values()) if kind == "most" else min(counts[label] for label in LABELS)
        return find_one([label for label in LABELS if counts[label] == extreme], f"{kind} common category")
    if counts[x] == counts[y]:
        return COMPARISONS[2]
    return COMPARISONS[0] if counts[x] > counts[y] else COMPARISONS[1]


def parse_question(question: str) -> tuple[str, str, str, int]:
    """(kind, category x, category y, cutoff day) of an oolong question; absent parts are "" / 0."""
    hits = [(k, m.groupdict()) for k, pattern in QUESTION_RES.items() if (m := pattern.fullmatch(question))]
    kind, args = find_one(hits, "question kind")
    date = args.get("date")
    return kind, args.get("x", ""), args.get("y", ""), records.parse_date(date) if date else 0


def solve(question: str, document: str) -> str | int:
    kind, x, y, cutoff = parse_question(question)
    labelled = [(day, records.label_of(text)) for day, _, text in records.parse(document)]
    return _answer(kind, labelled, x, y, cutoff)


def wrong_answers(task: Task, document: str) -> list[str | int]:
    if task.metric == "numeric":
        gold = int(task.answer)  # type: ignore[arg-type]
        return [gold + 1, gold - 1, gold + 5, "many"]
    return [a for a in (*LABELS, *COMPARISONS) if a != task.answer] + [""]


FAMILY = Family(
    NAME,
    "OOLONG aggregation over records whose labels must be read",
    generate,
    solve,
    wrong_answers,
    False,
    check=records.check_not_greppable,
)
validate = FAMILY.validate
