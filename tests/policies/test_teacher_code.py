"""The teacher's source-code move: callers, a constant's final value and a parameter's default computed in
code from what Python's syntax says, checked against the code families' reference readers."""

from __future__ import annotations

import contextlib
import io
import random

import pytest

from fathom.policies.looking import Sight, read_question
from fathom.policies.source_code import code_cell, code_question, code_shape
from fathom.tasks import Corpora, code, generate_task

CORPORA = Corpora()


def _finals(cell: str, document: str) -> list[object]:
    finals: list[object] = []
    with contextlib.redirect_stdout(io.StringIO()):
        exec(cell.split("```repl\n")[1].split("```")[0], {"ctx": document, "FINAL": finals.append})
    return finals


@pytest.mark.parametrize("family", ["code_calls", "code_value"])
def test_the_code_cell_answers_as_the_reference_reader_on_every_kind(family):
    kinds = set()
    for seed in range(30):
        task = generate_task(family, seed, 4096, ("easy", "medium", "hard")[seed % 3], CORPORA)
        ask = code_question(read_question(task.question))
        assert ask is not None, task.question
        kinds.add(ask.op)
        assert _finals(code_cell(random.Random(seed), ask), task.document) == [task.answer], task.question
    assert kinds == ({"callers"} if family == "code_calls" else {"final", "default"})


def test_every_template_of_the_code_families_reads_as_its_operation():
    for template in code.CALL_KINDS["callers"].templates:
        ask = code_question(read_question(template.format(name="sync_walrus")))
        assert ask is not None and (ask.op, ask.names) == ("callers", ("sync_walrus",)), template
    for template in code.VALUE_KINDS["final"].templates:
        ask = code_question(read_question(template.format(name="GLOOMY_FENNEL")))
        assert ask is not None and (ask.op, ask.names) == ("final", ("GLOOMY_FENNEL",)), template
    for template in code.VALUE_KINDS["default"].templates:
        ask = code_question(read_question(template.format(func="merge_pigeon", param="retries")))
        assert ask is not None and ask.op == "default" and {"merge_pigeon", "retries"} <= set(ask.names), (
            template
        )


def test_a_cell_that_finds_nothing_does_not_final():
    ask = code_question(read_question("Who calls sync_walrus()? List each calling function's name."))
    assert ask is not None
    assert _finals(code_cell(random.Random(0), ask), "def other(x):\n    return sync_walrus_async(x)\n") == []


def test_code_shape_sees_python_inside_a_class_and_not_prose():
    inside = (
        "        if not name:\n            name = '???'\n        return name\n\n"
        "    def user_line(self, frame):\n        import linecache\n"
    )
    prose = "The default was set long ago. If you call him, return the book.\nElse: nothing.\n" * 4
    assert code_shape(Sight(head=inside)) and not code_shape(Sight(head=prose))
