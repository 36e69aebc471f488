"""The teacher's log move: entries parsed in code from what the look printed, counts and neighbours computed in
code, on every log layout and question kind of the log families."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from teacher_play import run_cell

from fathom.policies.log_entries import (
    LogShape,
    answer_cell,
    log_question,
    log_shape,
    parse_cell,
    parse_services,
)
from fathom.policies.looking import Sight, read_question
from fathom.tasks import Corpora, generate_task, logs, logs_next

CORPORA = Corpora()


def _head(document: str) -> Sight:
    return Sight(chars=len(document), head=document[:900])


@pytest.mark.parametrize("seed", range(12))
def test_the_parse_cell_reads_the_entries_the_log_holds_in_every_layout(seed):
    task = generate_task("logs_count", seed, 4096, ("easy", "medium", "hard")[seed % 3], CORPORA)
    env = {"ctx": task.document}
    shape = log_shape(_head(task.document))
    assert shape is not None
    printed = run_cell(parse_cell(random.Random(seed), shape), env)
    truth = logs.parse_entries(task.document)
    # level (first four letters), service and request id of every entry, in order; noise lines are not entries
    assert [(e[0], e[1], e[2]) for e in env["entries"]] == [
        (t.level.lower()[:4], t.service, t.rid) for t in truth
    ]
    assert parse_services(printed) == sorted({t.service for t in truth})


def test_log_shape_refuses_what_is_not_a_log():
    table = "id,level,amount\n" + "\n".join(f"{i},info,{i * 7}" for i in range(20))
    prose = "The error was mine. I will debug it tomorrow, and warn the others.\n" * 12
    assert log_shape(Sight(head=table)) is None and log_shape(Sight(head=prose)) is None


@pytest.mark.parametrize(
    ("family", "kinds"), [("logs_count", logs.COUNT_KINDS), ("logs_next", logs_next.NEXT_KINDS)]
)
def test_every_phrasing_of_the_log_families_gets_its_operation_and_the_cells_answer_it(family, kinds):
    ops = {"count": "count", "count_after": "count_after", "exists": "exists"}
    ops |= {"next_same": "next", "next_any": "next", "prev_same": "prev", "prev_any": "prev"}
    right, seen = Counter(), Counter()
    for seed in range(40):
        task = generate_task(family, seed, 4096, ("easy", "medium", "hard")[seed % 3], CORPORA)
        kind = task.meta["kind"]
        ask = log_question(read_question(task.question))
        assert ask is not None and ask.op == ops[kind], (task.question, ask)
        answers: list = []
        env = {"ctx": task.document, "FINAL": answers.append}
        shape = log_shape(_head(task.document))
        assert shape is not None
        services = parse_services(run_cell(parse_cell(random.Random(seed), shape), env))
        cell = answer_cell(random.Random(seed), shape, ask, services)
        assert cell is not None
        run_cell(cell, env)
        seen[kind] += 1
        right[kind] += answers == [task.answer]
    assert set(seen) == set(kinds)
    assert sum(right.values()) >= 0.95 * sum(seen.values()), (right, seen)


def test_a_service_is_matched_exactly_against_the_listed_ones():
    ask = log_question(read_question("How many ERROR entries did the service billing-api-canary write?"))
    assert ask is not None and ask.op == "count" and ask.level == "ERROR"
    cell = answer_cell(random.Random(0), LogShape(1, 2, "iso"), ask, ["billing-api", "billing-api-canary"])
    assert cell is not None and "e[1] == 'billing-api-canary'" in cell
    # no listed service is the one asked about: no cell (the teacher goes on to search)
    assert answer_cell(random.Random(0), LogShape(1, 2, "iso"), ask, ["billing", "ledger-api"]) is None


def test_every_template_of_the_log_families_reads_as_its_operation_with_the_service_named():
    ops = {"count": "count", "count_after": "count_after", "exists": "exists"}
    ops |= {"next_same": "next", "next_any": "next", "prev_same": "prev", "prev_any": "prev"}
    for kinds in (logs.COUNT_KINDS, logs_next.NEXT_KINDS):
        for kind, phrasings in kinds.items():
            for template in phrasings.templates:
                q = template.format(
                    service="billing-api-canary",
                    level="WARNING",
                    rid="0a1b2c3d",
                    cutoff="2024-05-19 07:18:26",
                )
                ask = log_question(read_question(q))
                assert ask is not None and ask.op == ops[kind], q
                assert kind.endswith("_any") or "billing-api-canary" in ask.names, q
                assert ask.op in ("next", "prev") or ask.level == "WARNING", q
                assert ask.op != "count_after" or ask.cutoff == (2024, 5, 19, 7, 18, 26), q
