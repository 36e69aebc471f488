"""Every family: validate() passes over 200 seeds, catches broken tasks, and generation is pure."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fathom.reward.metrics import score
from fathom.tasks import (
    DIFFICULTIES,
    FAMILIES,
    InvalidTaskError,
    babi,
    generate_task,
    keychain,
    niah,
    oolong,
    pairs,
    records,
    validate_task,
    vartrack,
)
from fathom.tasks.words import ADJECTIVES, NOUNS, OBJECTS, PEOPLE, PLACES

SEEDS = range(200)
LENGTHS = (2048, 4096)


def test_the_seven_families_are_registered():
    assert {"niah", "multikey", "vartrack", "oolong", "pairs", "babi", "keychain"} <= set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_validate_passes_over_200_seeds(family, corpora):
    seen_answers = set()
    for seed in SEEDS:
        difficulty = DIFFICULTIES[seed % 3]
        task = generate_task(family, seed, LENGTHS[seed % 2], difficulty, corpora)
        assert task.family == family and task.difficulty == difficulty and task.seed == seed
        assert task.length_chars == len(task.document)
        validate_task(task)
        seen_answers.add(repr(task.answer))
    assert len(seen_answers) > 5  # answers really vary with the seed


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_validate_rejects_a_wrong_gold(family, corpora):
    task = generate_task(family, 7, 2048, "medium", corpora)
    answer = task.answer
    if isinstance(answer, list):
        wrong = (
            answer[:-1]
            if len(answer) > 1
            else [*answer, answer[0] + 1 if isinstance(answer[0], int) else "x"]
        )
    elif isinstance(answer, int):
        wrong = answer + 3
    else:
        wrong = next(a for a in (*records.LABELS, *oolong.COMPARISONS, *PLACES, "1234567") if a != answer)
    with pytest.raises(InvalidTaskError):
        validate_task(dataclasses.replace(task, answer=wrong))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generation_is_pure_and_seeded(family, corpora):
    a = generate_task(family, 11, 2048, "hard", corpora)
    b = generate_task(family, 11, 2048, "hard", corpora)
    c = generate_task(family, 12, 2048, "hard", corpora)
    assert a == b and a.document == b.document
    assert a.document != c.document


def test_validate_rejects_a_tampered_document(corpora):
    task = generate_task("niah", 3, 2048, "easy", corpora)
    key = niah.QUESTION_RE.search(task.question).group(1)
    document = task.document.replace(f"for {key} is: {task.answer}", f"for {key} is: 1000000")
    assert document != task.document
    tampered = dataclasses.replace(task, document=document, length_chars=len(document))
    with pytest.raises(InvalidTaskError):
        validate_task(tampered)


def test_unknown_difficulty_and_family_are_errors(corpora):
    with pytest.raises(ValueError, match="difficulty"):
        generate_task("niah", 0, 2048, "extreme", corpora)
    with pytest.raises(KeyError, match="unknown family"):
        generate_task("nope", 0, 2048, "easy", corpora)


def test_niah_distractors_look_alike_at_hard(corpora):
    task = generate_task("niah", 5, 4096, "hard", corpora)
    key = niah.QUESTION_RE.search(task.question).group(1)
    keys = [k for k, _ in niah.NEEDLE_RE.findall(task.document)]
    assert keys.count(key) == 1 and len(keys) == 13
    alike = [k for k in keys if k != key and set(k.split("-")) & set(key.split("-"))]
    assert len(alike) >= 9


def test_vartrack_statements_follow_their_sources(corpora):
    task = generate_task("vartrack", 9, 4096, "hard", corpora)
    assert len(task.answer) == vartrack.LEVELS["hard"][0]
    assert vartrack.solve(task.question, task.document) == task.answer


def test_keychain_chain_is_out_of_order_at_hard(corpora):
    task = generate_task("keychain", 4, 4096, "hard", corpora)
    links = keychain.LINK_RE.findall(task.document)
    start = keychain.QUESTION_RE.search(task.question).group(1)
    assert sum(1 for opener, *_ in links if opener[:4] == start[:4]) > 1


def test_word_lists_have_no_duplicates():
    for words in (ADJECTIVES, NOUNS, PEOPLE, PLACES, OBJECTS):
        assert len(set(words)) == len(words)


def test_record_bank_never_names_a_label():
    texts = [*records.OPENERS, *records.CLOSERS] + [t for ts in records.TEMPLATES.values() for t in ts]
    texts += [w for fillers in records.SLOTS.values() for w in fillers]
    for text in texts:
        assert not set(re.findall(r"[a-z]+", text.lower())) & records.LABEL_WORDS, text


def test_label_of_reads_every_template_and_filler():
    import random

    rng = random.Random(0)
    for label, templates in records.TEMPLATES.items():
        for template in templates:
            for _ in range(30):
                slots = {s: rng.choice(records.SLOTS[s]) for s in re.findall(r"\{(\w+)\}", template)}
                text = template.format(**slots)
                assert records.label_of(text) == label
                chatty = text[0].lower() + text[1:] if template[0].isalpha() else text
                assert records.label_of("Trivia night: " + chatty + " Thanks!") == label
    with pytest.raises(ValueError):
        records.label_of("What is the airspeed of an unladen swallow?")


def test_oolong_most_and_least_have_unique_answers(corpora):
    kinds = set()
    for seed in range(60):
        task = generate_task("oolong", seed, 2048, "hard", corpora)
        kinds.add(task.meta["kind"])
        counts = {}
        for _, _, text in records.parse(task.document):
            label = records.label_of(text)
            counts[label] = counts.get(label, 0) + 1
        if task.meta["kind"] in ("most", "least"):
            assert len(set(counts.values())) == len(records.LABELS)
    assert kinds == set(oolong.KINDS)


def test_pairs_are_modest_and_need_reading(corpora):
    for seed in range(30):
        task = generate_task("pairs", seed, 4096, DIFFICULTIES[seed % 3], corpora)
        assert 1 <= len(task.answer) <= 40
        assert all(lo < hi for lo, hi in task.answer)
        _, a, _ = pairs.parse_question(task.question)
        assert task.document.count(a) == 1  # only in the header: the label is never written on a record


def test_babi_variants_and_facts(corpora):
    variants = set()
    for seed in range(30):
        task = generate_task("babi", seed, 2048, "medium", corpora)
        variants.add(task.meta["variant"])
        assert len(babi.FACT_RE.findall(task.document)) == task.meta["facts"]
        assert score("exact", task.answer, task.answer) == 1.0
    assert variants == set(babi.VARIANTS)
