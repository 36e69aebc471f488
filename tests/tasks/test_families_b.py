"""The prose-shaped families (families-b): generation, validation, determinism, phrasings, wrong answers."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fathom.reward.metrics import score
from fathom.tasks import (
    FAMILIES,
    FAMILIES_B,
    InvalidTaskError,
    bundle,
    chat,
    generate_task,
    glossary,
    mail,
    manual,
    validate_task,
)
from fathom.tasks.haystack import estimate_tokens
from fathom.tasks.prose import FLAT_CHARS_PER_TOKEN, Phrasings, parse_kind

NAMES = [f.name for f in FAMILIES_B]
# Every kind's phrasings, per family: a question must come from exactly one template of one kind.
PHRASINGS: dict[str, dict[str, Phrasings]] = {
    "chat_prev": chat.PREV_QUESTIONS,
    "chat_count": chat.COUNT_QUESTIONS,
    "email_manager": mail.MANAGER_QUESTIONS,
    "email_repliers": mail.REPLIER_QUESTIONS,
    "glossary_lookup": glossary.LOOKUP_QUESTIONS,
    "glossary_defined": glossary.DEFINED_QUESTIONS,
    "manual_default": manual.DEFAULT_QUESTIONS,
    "manual_count": manual.COUNT_QUESTIONS,
    "bundle_locate": bundle.LOCATE_QUESTIONS,
    "bundle_compare": bundle.COMPARE_QUESTIONS,
}
K8 = 8192


def template_of(family: str, question: str) -> tuple[str, int]:
    hits = [(k, i) for k, p in PHRASINGS[family].items() if (i := p.template_of(question)) is not None]
    assert len(hits) == 1, (family, question, hits)
    return hits[0]


def test_registered_in_one_block():
    assert len(NAMES) == len(set(NAMES)) and set(NAMES) <= set(FAMILIES)
    assert set(PHRASINGS) == set(NAMES)


@pytest.mark.parametrize("family", NAMES)
def test_generates_and_validates_at_8k(family, corpora):
    answers = set()
    for seed in range(12):
        difficulty = ("easy", "medium", "hard")[seed % 3]
        task = generate_task(family, seed, K8, difficulty, corpora)
        assert task.family == family and task.length_chars == len(task.document)
        validate_task(task)
        wrong = FAMILIES[family].wrong_answers(task, task.document)
        assert wrong and all(score(task.metric, w, task.answer) < 1.0 for w in wrong)
        answers.add(repr(task.answer))
    assert len(answers) >= 6  # the answer moves with the seed


@pytest.mark.parametrize("family", NAMES)
def test_at_least_five_phrasings_across_seeds(family, corpora):
    used = {template_of(family, generate_task(family, s, 2048, "easy", corpora).question) for s in range(60)}
    assert len(used) >= 5, used


@pytest.mark.parametrize("family", NAMES)
def test_deterministic_by_seed(family, corpora):
    a = generate_task(family, 5, K8, "medium", corpora)
    b = generate_task(family, 5, K8, "medium", corpora)
    c = generate_task(family, 6, K8, "medium", corpora)
    assert a == b and a.document == b.document
    assert a.document != c.document


@pytest.mark.parametrize("family", NAMES)
def test_validate_rejects_a_wrong_gold(family, corpora):
    task = generate_task(family, 3, K8, "hard", corpora)
    wrong = FAMILIES[family].wrong_answers(task, task.document)[0]
    with pytest.raises(InvalidTaskError):
        validate_task(dataclasses.replace(task, answer=wrong))


@pytest.mark.parametrize("family", NAMES)
def test_length_estimate_is_close(family, corpora):
    task = generate_task(family, 2, 32768, "medium", corpora)
    # prose dominates every document; the prose rate alone already lands near the target
    rate = FLAT_CHARS_PER_TOKEN.get(task.meta.get("source", ""), 3.95)
    assert 0.6 < len(task.document) / rate / 32768 < 1.4
    assert 0.6 < estimate_tokens(task.document) / 32768 < 1.4


def test_chat_prev_answer_is_the_neighbouring_speaker(corpora):
    echoed = 0
    for seed in range(6):
        task = generate_task("chat_prev", seed, K8, "hard", corpora)
        direction, slots = parse_kind(chat.PREV_QUESTIONS, task.question)
        msgs = chat.parse_log(task.document)
        echoed += task.document.count(slots["quote"]) == 2  # another speaker quotes it (when one follows)
        i = next(
            i for i, (_, who, body) in enumerate(msgs) if who == slots["name"] and slots["quote"] in body
        )
        assert msgs[i - 1 if direction == "before" else i + 1][1] == task.answer != slots["name"]
    assert echoed >= 3


def test_chat_count_window_boundaries_hold_no_message(corpora):
    for seed in range(20):
        task = generate_task("chat_count", seed, K8, "medium", corpora)
        if task.meta["kind"] == "speaker_word":
            continue
        _, slots = parse_kind(chat.COUNT_QUESTIONS, task.question)
        start, end = chat._parse_minute(slots["t1"]), chat._parse_minute(slots["t2"])
        minutes = {t.replace(second=0) for t, _, _ in chat.parse_log(task.document)}
        assert start not in minutes and end not in minutes


@pytest.mark.slow
@pytest.mark.parametrize("family", NAMES)
def test_one_million_tokens(family, corpora):
    task = generate_task(family, 1, 1 << 20, "hard", corpora)
    validate_task(task)
    assert 0.6 < estimate_tokens(task.document) / (1 << 20) < 1.4


def test_email_manager_needs_the_directory(corpora):
    """The gold is the directory's manager of the thread's sender, who is never the sender."""
    for seed in range(6):
        task = generate_task("email_manager", seed, K8, "medium", corpora)
        kind, slots = parse_kind(mail.MANAGER_QUESTIONS, task.question)
        staff = mail.parse_directory(task.document)
        starter, replies = mail._thread_messages(mail.parse_messages(task.document), slots["subject"])
        who = starter if kind == "starter" else replies[0]
        assert staff[who][1] == task.answer != staff[who][0]


def test_email_repliers_exclude_twin_threads(corpora):
    twins = 0
    for seed in range(12):
        task = generate_task("email_repliers", seed, K8, "hard", corpora)
        _, slots = parse_kind(mail.REPLIER_QUESTIONS, task.question)
        twins += f"{slots['subject']} (follow-up)" in task.document
        assert task.answer == sorted(set(task.answer)) and task.answer
    assert twins >= 1


def test_glossary_headwords_are_unseen_and_ordered(corpora):
    for seed in range(4):
        task = generate_task("glossary_defined", seed, K8, "hard", corpora)
        entries = glossary.parse_entries(task.document)
        terms = [t.lower() for t, _ in entries]
        assert terms == sorted(terms) and len(set(terms)) == len(terms) > 50
        # a headword occurs in the definitions only as a "See also" reference
        body = re.sub(r"see also: [a-z]+\.", "", " ".join(text for _, text in entries).lower())
        assert not [t for t in terms if re.search(rf"\b{t}\b", body)]


def test_manual_options_recur_with_other_defaults(corpora):
    """The asked option appears in other sections too, so only the section's own table answers."""
    recur = 0
    for seed in range(8):
        task = generate_task("manual_default", seed, K8, "medium", corpora)
        _, slots = parse_kind(manual.DEFAULT_QUESTIONS, task.question)
        parsed = manual.parse_manual(task.document)
        assert [d for o, _, d in parsed[slots["cmd"]] if o == slots["opt"]] == [task.answer]
        recur += sum(any(o == slots["opt"] for o, _, _ in opts) for opts in parsed.values()) > 1
    assert recur >= 6
