"""OOLONG-style aggregation: count and compare labels that must be read off every record.

The document is `fathom.tasks.records`: general-knowledge questions, one record per line, each of one of
six categories (`records.LABELS`) that never appear in the instances. Questions (kind chosen by the
seed with `KIND_WEIGHTS`: 40% count, 40% count_after, 20% the rest):

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

Every question names its document: "among the 3,744 questions above (dated Jan 2, 2022 to Dec 30,
2024)" (`records.SPAN`: record count, earliest and latest date; `validate()` checks them), so no two
documents share a question text. Counts dominate because a blind guess rarely hits them: the asked
category's share in a count question is uniform in `COUNT_SHARE` (6% to 70%), so its count is anywhere
from n/16 to 0.7 n; count_after cutoffs fall in the first half of the three years. Chance alone answers
most/least one time in six and compare one time in three, so those stay a minority (REWARD_AUDIT.md).

Ties never make a question ambiguous: after sampling, records are relabelled (their instance rewritten)
until all six counts differ, so "most" and "least" have one answer; a ``compare`` question that wants
"same frequency" then equalises exactly its two categories.

Difficulty is the skew of the label distribution: easy has wide gaps between counts, hard is near
uniform (a classifier that mislabels a few records flips a most/least/compare answer; a count question
sets its own category's share, and the others keep the skew). For an expert: `parse_question` gives
(kind, x, y, cutoff day) and `QUESTION_RES[kind]` every slot by name (x, y, date, n, first, last);
`records.RECORD_RE` and `records.label_of` do the rest.

This module does not write records or instances (see `fathom.tasks.records`).
"""

from __future__ import annotations

import bisect
import itertools
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
# How often the seed picks each kind. Counts are most of the family: a blind guess of a count is rarely
# near it (and numeric partial credit decays fast), while chance alone names the most/least common of six
# categories 1 time in 6 and picks one of three comparison answers 1 time in 3 (REWARD_AUDIT.md).
KIND_WEIGHTS = (0.4, 0.4, 0.07, 0.07, 0.06)
COMPARISONS = ("more common", "less common", "same frequency")
_CATS = "one of: " + ", ".join(LABELS)
_NAME_IT = f"Answer with the category name ({_CATS})."
_SPAN = records.SPAN  # "the {n} questions above (dated {first} to {last})": specific to the document
QUESTIONS = {
    "count": "How many of " + _SPAN + " are of the category '{x}'? Answer with a number.",
    "count_after": (
        "How many of " + _SPAN + " are dated after {date} and of the category '{x}'? Answer with a number."
    ),
    "most": "Which category is the most common among " + _SPAN + "? " + _NAME_IT,
    "least": "Which category is the least common among " + _SPAN + "? " + _NAME_IT,
    "compare": (
        "Is the category '{x}' more common, less common, or the same frequency as the category '{y}' "
        "among " + _SPAN + "? Answer with exactly one of: more common, less common, same frequency."
    ),
}
_SLOTS = {"x": alternation(LABELS), "y": alternation(LABELS), "date": records.DATE, **records.SPAN_SLOTS}
QUESTION_RES = {kind: template_regex(question, _SLOTS) for kind, question in QUESTIONS.items()}
# Spread of the log-weights of the six labels: larger = more skewed.
SKEW = {"easy": 1.2, "medium": 0.6, "hard": 0.15}
# Share of the asked category in count questions, drawn uniformly (whatever the difficulty), so the count
# is anywhere from n/16 to 0.7 n and a blind guess from the record count n in the question is far off.
COUNT_SHARE = (0.06, 0.7)
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
    kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
    x, y = rng.sample(LABELS, 2)
    weights = dict(zip(LABELS, label_weights(rng, difficulty), strict=True))
    if kind.startswith("count"):  # the asked share is uniform: the count cannot be told from n alone
        share, rest = rng.uniform(*COUNT_SHARE), 1 - weights[x]
        weights = {k: share if k == x else w * (1 - share) / rest for k, w in weights.items()}
    cumulative = list(itertools.accumulate(weights[label] for label in LABELS))
    n_users = max(8, length_tokens // 256)
    users = rng.sample(range(10_000, 100_000), n_users)

    def make() -> Record:
        label = LABELS[min(len(LABELS) - 1, bisect.bisect(cumulative, rng.random()))]
        return Record(rng.randrange(records.N_DAYS), rng.choice(users), label, records.instance(rng, label))

    # Six distinct counts need 21 records; 30 leaves the sampler room (documents under ~1K tokens grow).
    recs = records.fill(chars_for_tokens(length_tokens, "records") - 700, make, min_records=30)
    counts = Counter(r.label for r in recs)
    target = distinct_targets(counts)
    # A third of compare questions want "same frequency": the larger of the two gives its surplus to a third.
    if kind == "compare" and rng.random() < 1 / 3:
        low, high = sorted((x, y), key=target.__getitem__)
        z = next(label for label in LABELS if label not in (x, y))
        target[z] += target[high] - target[low]
        target[high] = target[low]
    recs = relabel(rng, recs, target)
    cutoff = rng.randrange(records.N_DAYS // 10, records.N_DAYS // 2)
    date = records.date_text(cutoff)
    question = QUESTIONS[kind].format(x=x, y=y, date=date, **records.span(recs))
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


def question_parts(question: str) -> tuple[str, dict[str, str]]:
    """(kind, slot values) of an oolong question; InvalidTaskError if it fits no template."""
    hits = [(k, m.groupdict()) for k, pattern in QUESTION_RES.items() if (m := pattern.fullmatch(question))]
    return find_one(hits, "question kind")


def parse_question(question: str) -> tuple[str, str, str, int]:
    """(kind, category x, category y, cutoff day) of an oolong question; absent parts are "" / 0."""
    kind, args = question_parts(question)
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


def check(task: Task, document: str) -> None:
    """Instances never name a label, and the question's record count and date span are the document's."""
    records.check_not_greppable(task, document)
    records.check_span(question_parts(task.question)[1], document)


FAMILY = Family(
    NAME,
    "OOLONG aggregation over records whose labels must be read",
    generate,
    solve,
    wrong_answers,
    False,
    check=check,
)
validate = FAMILY.validate
