"""The teacher's llm() prompts are written in one literal form (triple double quotes) that any question fits."""

from __future__ import annotations

import ast
import random

import pytest

from fathom.policies.moves import classify, prose, read_lines


@pytest.mark.parametrize(
    "text",
    [
        "What is the total 'quantity' of rows with 'region' = 'South'?",
        'He wrote "done" twice.',
        "Read these lines.\nQuestion: Which one's older?",
        "plain words",
    ],
)
def test_prose_is_triple_quoted_and_evaluates_to_the_text(text):
    literal = prose(text)
    assert literal.startswith('"""') and literal.endswith('"""')
    assert ast.literal_eval(literal) == text


@pytest.mark.parametrize("text", ['ends in a quote "x"', 'holds """ itself', "a back\\slash"])
def test_prose_falls_back_to_repr_where_triple_quotes_would_not_hold(text):
    assert prose(text) == repr(text) and ast.literal_eval(prose(text)) == text


def first_argument(cell: str, call: str) -> ast.expr:
    code = cell.split("```repl\n", 1)[1].rsplit("```", 1)[0]
    for node in ast.walk(ast.parse(code)):  # parses: an apostrophe in the question cannot break the cell
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == call:
            return node.args[0]
    raise AssertionError(f"no {call}() call in {code!r}")


def test_a_read_cell_passes_a_question_with_apostrophes_unchanged():
    question = "What is the total 'quantity' of rows with 'region' = 'Southwest'?"
    cell = read_lines(random.Random(0), question, "ctx[:500]")
    prompt = first_argument(cell, "llm")
    assert isinstance(prompt, ast.Constant) and prompt.value.endswith("Question: " + question)
    assert "llm('" not in cell and 'llm("""' in cell


def test_a_classify_cell_writes_its_prompt_in_triple_quotes():
    cell = classify(random.Random(1), 2, ["cook's tools", "garden"])
    pairs = first_argument(cell, "llm_batch")
    assert isinstance(pairs, ast.ListComp)
    assert 'llm_batch([("""' in cell and "cook's tools" in ast.literal_eval(pairs.elt.elts[0])
