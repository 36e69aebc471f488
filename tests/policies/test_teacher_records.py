"""The teacher's JSON-records move: records parsed in code, the question's words looked up among their values,
filtered and picked in code, on every question kind and key spelling of jsonl_lookup."""

from __future__ import annotations

import random

import pytest
from teacher_play import run_cell

from fathom.policies.json_records import (
    answer_cell,
    flatten,
    index_cell,
    json_shape,
    parse_seen,
    records_ask,
    terms_of,
)
from fathom.policies.looking import Sight, read_question
from fathom.tasks import Corpora, generate_task, jsonl

CORPORA = Corpora()


def _play(question: str, document: str) -> tuple[list[object], str]:
    """Both cells on `document` as the teacher writes them: (what they FINAL, the index cell's printout)."""
    q = read_question(question)
    shape = json_shape(Sight(chars=len(document), head=document[:900]))
    assert shape is not None
    finals: list[object] = []
    env = {"ctx": document, "FINAL": finals.append}
    printed = run_cell(index_cell(random.Random(0), terms_of(q)), env)
    ask = records_ask(q, shape, printed)
    assert ask is not None, (question, printed)
    run_cell(answer_cell(random.Random(0), ask), env)
    return finals, printed


@pytest.mark.parametrize("seed", range(24))
def test_the_cells_answer_as_the_generator_on_every_kind(seed):
    task = generate_task("jsonl_lookup", seed, 8192, ("easy", "medium", "hard")[seed % 3], CORPORA)
    finals, printed = _play(task.question, task.document)
    assert finals == [task.answer], (task.question, printed)
    # the index counts every whole record the generator wrote (lines cut short are skipped)
    assert printed.startswith(f"{len(jsonl.read_users(task.document))} records")


def test_every_template_reads_as_its_kind():
    task = next(
        t
        for s in range(40)
        if not (t := generate_task("jsonl_lookup", s, 8192, "hard", CORPORA)).meta["camel"]
    )
    users = jsonl.read_users(task.document)
    target = max((u for u in users if u["active"]), key=lambda u: u["score"])
    slots = {"id": str(target["id"]), "email": target["email"], "plan": target["plan"]}
    slots["city"] = target["address"]["city"]
    for kind, phrasings in jsonl.LOOKUP_KINDS.items():
        for template in phrasings.templates:
            for key in ("plan", "address.country") if kind != "top" else ("",):
                s = {**slots, "field": key}
                want = jsonl.answer_of(kind, users, s)
                assert _play(template.format(**s), task.document)[0] == [want], template


def test_several_records_fitting_a_lookup_give_no_final():
    lines = [
        '{"id": 7, "plan": "pro", "city": "Oslo"}',
        '{"id": 8, "plan": "pro", "city": "Oslo"}',
        '{"id": 9, "plan": "team", "city": "Perm"}',
    ]
    finals, printed = _play("What is the id of the user on plan pro?", "\n".join(lines) + "\n")
    assert finals == [] and "'pro' is a value of {'plan': 2}" in printed


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("Which id has the active user on plan pro?", 7),
        ("Which id has the inactive user on plan pro?", 8),
        ("On plan pro, which user that is not active has the highest score? Give the id.", 8),
    ],
)
def test_a_true_false_key_filters_as_the_question_names_it(question, answer):
    lines = [
        '{"id": 7, "plan": "pro", "active": true, "score": 5}',
        '{"id": 8, "plan": "pro", "active": false, "score": 9}',
        '{"id": 9, "plan": "team", "active": false, "score": 1}',
    ]
    assert _play(question, "\n".join(lines) + "\n")[0] == [answer]


def test_the_index_printout_reads_back():
    printed = (
        "3 records; keys: ['a']\n'Perm' is a value of {'address.city': 6}\n'active' is a key: [('True', 2)]\n"
    )
    assert parse_seen(printed) == ({"Perm": {"address.city": 6}}, {"active": {"True": 2}})


def test_json_shape_refuses_what_is_not_json_lines():
    config = '{\n  "name": "svc",\n  "port": 8080,\n  "debug": false\n}\n' * 4
    table = "id,plan,score\n" + "\n".join(f"{i},pro,{i * 3}" for i in range(20))
    assert json_shape(Sight(head=config)) is None and json_shape(Sight(head=table)) is None
    shape = json_shape(Sight(head='{"id": 1, "a": {"b": 2}}\n' * 3))
    assert shape is not None and shape.keys == ("id", "a.b") and shape.numeric == {"id", "a.b"}
    assert flatten({"a": {"b": {"c": 1}}, "d": [1]}) == {"a.b.c": 1, "d": [1]}
