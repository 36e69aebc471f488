"""The teacher writes no line that closes a run of brackets around a literal: GPU proof run 13's student
(Qwen2.5-Coder-1.5B) dropped one bracket in most of its failed cells, on exactly these lines:
`line.startswith(('Aug ', 'Sep ')) and ...]`, `not line.startswith("#")]` (`")]` is one Qwen token; the
student wrote its neighbour `"]`) and `llm_batch([(<a triple-quoted prompt>, chunk) for chunk in chunks])`
cut after `chunk)`. The literal is named on a line of its own, or the test is written without the call."""

from __future__ import annotations

import ast

import pytest
from teacher_play import qwen_chat

from fathom.env.parsing import code_blocks
from fathom.policies.teacher import play_teacher
from fathom.tasks import generate_task

SUBCALLS = {"llm", "llm_batch"}
QUOTE_CLUSTERS = {'")]', "')]", '"))', "'))"}  # Qwen tokens: a closing quote and two brackets


def _literal_inside_a_call_in_brackets(code: str) -> list[str]:
    """Source lines where a tuple, or a prompt string, is written inside a call that sits in a comprehension
    or a list: what makes the student close three or more brackets in a row after a literal."""
    tree = ast.parse(code)
    found = []
    for outer in ast.walk(tree):
        if not isinstance(outer, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp | ast.List):
            continue
        for call in ast.walk(outer):
            if not isinstance(call, ast.Call):
                continue
            tuple_arg = any(isinstance(a, ast.Tuple) and a.elts for a in call.args)
            if tuple_arg:
                found.append(ast.get_source_segment(code, outer) or "")
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in SUBCALLS:
            for arg in call.args:  # llm_batch([(prompt, chunk) ...]): a prompt inside the list it is given
                if isinstance(arg, ast.ListComp | ast.List | ast.GeneratorExp):
                    texts = [
                        n for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    ]
                    if any(len(t.value) > 40 for t in texts):
                        found.append(ast.get_source_segment(code, call) or "")
    return found


def test_the_check_finds_the_lines_run_13s_student_broke():
    assert _literal_inside_a_call_in_brackets(
        "heads = [i for i, line in enumerate(lines) if line.startswith(('Aug ', 'Sep ')) and len(line) < 100]"
    )
    assert _literal_inside_a_call_in_brackets(
        'replies = llm_batch([("""Read this part of a document and answer the question.""", c) for c in chunks])'
    )
    assert not _literal_inside_a_call_in_brackets(
        "prefixes = ('Aug ', 'Sep ')\nheads = [i for i, line in enumerate(lines) if line.startswith(prefixes)]"
    )
    assert not _literal_inside_a_call_in_brackets(
        'ask = """Read this part of a document and answer the question."""\n'
        "replies = llm_batch([(ask, chunk) for chunk in chunks])"
    )


@pytest.mark.parametrize(
    ("family", "seed"),
    [
        ("bundle_locate", 0),  # heading prefixes kept beside the hits
        ("manual_default", 1),
        ("logs_count", 0),  # the log cells
        ("table_aggregate", 0),  # the table cell
        ("jsonl_lookup", 4),  # the JSON-records cells
        ("email_manager", 0),  # the mail cells
        ("jsonl_join", 0),  # unseen families
        ("glossary_defined", 1),
        ("code_calls", 0),  # the source-code cell
        ("table_compare", 1),
    ],
)
def test_no_teacher_cell_closes_brackets_after_a_literal(family, seed):
    chat = qwen_chat()
    (episode,) = play_teacher(chat, [generate_task(family, seed, 32768)], max_turns=10)
    cells = [code for t in episode.turns for code in code_blocks(t.text)]
    assert len(cells) >= 2
    assert [line for c in cells for line in _literal_inside_a_call_in_brackets(c)] == []
    tokens = {chat.tokenizer.decode([i]).strip() for c in cells for i in chat.tokenizer.encode(c)}
    assert not tokens & QUOTE_CLUSTERS, tokens & QUOTE_CLUSTERS
