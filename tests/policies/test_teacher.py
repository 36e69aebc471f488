"""The teacher: it knows only the conversation, solves the seven original families, and stays grounded."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fathom.eval.policies import TeacherPolicy
from fathom.policies.teacher import split_conversation, teacher_turn
from fathom.tasks import generate_task

ORIGINAL = ("niah", "multikey", "vartrack", "oolong", "pairs", "babi", "keychain")
POLICIES = Path(__file__).parents[2] / "src" / "fathom" / "policies"


@pytest.mark.parametrize(
    "module",
    [
        "teacher.py",
        "moves.py",
        "looking.py",
        "tabular.py",
        "log_entries.py",
        "source_code.py",
        "json_records.py",
        "mail_headers.py",
    ],
)
def test_the_teacher_imports_no_task_knowledge(module):
    tree = ast.parse((POLICIES / module).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and (m.startswith("fathom.tasks") or m.endswith("expert"))}


def test_split_conversation_reads_question_and_observations():
    first = "Question: Where is Mary?\n\n`ctx` is a str of 1,000 characters (about 250 tokens).\nStart."
    conv = f"<s>{first}</s><a>look</a><u>[output]\n12 chars\n\n[turn 1/12; 11 left]</u><a>"
    assert split_conversation(conv) == ("Where is Mary?", ["[output]\n12 chars\n\n"], True)
    assert teacher_turn(conv) == teacher_turn(conv)  # a pure function of the conversation


@pytest.fixture(scope="module")
def rows():
    tasks = [
        generate_task(f, 50 + i, 8192, ("easy", "medium", "hard")[i % 3]) for i, f in enumerate(ORIGINAL)
    ]
    return TeacherPolicy().run(tasks)


def test_the_teacher_solves_each_original_family_grounded(rows):
    assert [(r["family"], r["correct"], r["grounded"]) for r in rows] == [(f, True, True) for f in ORIGINAL]
    # It looks before it searches: no turn-0 code names anything from the document.
    assert all("ctx[:" in r["trace"]["turns"][0]["text"] for r in rows)


def test_the_teachers_wording_and_moves_vary(rows):
    firsts = {r["trace"]["turns"][0]["text"] for r in rows}
    assert len(firsts) >= 3
    assert any(t["subcalls"] for r in rows for t in r["trace"]["turns"])  # it delegates some reading


# the code moves' training families (what SFT shows), then the unseen families they lead to
TRAINED_MOVES = ("table_aggregate", "logs_count", "code_value", "jsonl_lookup", "email_manager")
UNSEEN_MOVES = ("logs_next", "code_calls", "table_compare", "email_repliers")


def test_tables_logs_records_mail_and_source_are_answered_in_code_grounded_with_no_llm_call():
    """The five code moves, on training families and the unseen ones they lead to: right, with no reading, so
    no reader can lose them, and grounded on the training families (SFT keeps them)."""
    tasks = [
        generate_task(f, 70 + i, 8192, ("easy", "medium", "hard")[i % 3])
        for f in TRAINED_MOVES + UNSEEN_MOVES
        for i in range(3)
    ]
    rows = TeacherPolicy().run(tasks)
    assert [(r["family"], r["correct"], r["llm_calls"]) for r in rows] == [(t.family, True, 0) for t in tasks]
    # grounded where SFT trains (an unseen family's cell may name `def ` before a search has shown it)
    assert all(r["grounded"] for r in rows if r["family"] in TRAINED_MOVES)
