"""Every cell the teacher writes defines the helpers it calls: a student that skips a cell or splices lines
from two of them cannot learn to call a function that only some other cell defines (GPU proof run 8: 71 of
240 unseen turns raised a `NameError`, most on a helper or a variable another cell had defined)."""

from __future__ import annotations

import ast
import builtins

import pytest
from teacher_play import qwen_chat

from fathom.env.parsing import code_blocks
from fathom.policies.teacher import play_teacher
from fathom.tasks import generate_task

PRIMITIVES = {"llm", "llm_batch", "FINAL", "FINAL_VAR"}  # what the REPL gives every cell


def _called_but_not_defined(code: str) -> set[str]:
    """The bare names a cell calls that are neither builtins, REPL primitives, nor defined or imported in it."""
    tree = ast.parse(code)
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            own.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            own.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            own.update(t.id for t in node.targets if isinstance(t, ast.Name))
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return called - own - PRIMITIVES - set(dir(builtins))


def test_the_check_finds_a_helper_defined_elsewhere():
    assert _called_but_not_defined("keep = {j for i in hit for j in paragraph(i)}") == {"paragraph"}
    assert _called_but_not_defined("def paragraph(i):\n    return [i]\nkeep = paragraph(3)") == set()


@pytest.mark.parametrize(
    ("family", "seed"),
    [
        ("bundle_locate", 0),
        ("email_manager", 0),
        ("glossary_lookup", 1),
        ("email_repliers", 1),
        ("oolong", 0),
    ],
)
def test_every_teacher_cell_defines_the_helpers_it_calls(family, seed):
    (episode,) = play_teacher(qwen_chat(), [generate_task(family, seed, 32768)], max_turns=10)
    cells = [code for t in episode.turns for code in code_blocks(t.text)]
    assert len(cells) >= 4
    assert [_called_but_not_defined(c) for c in cells] == [set()] * len(cells)
