"""The teacher's block moves (counts and filters in code) and the scoped cut, on long documents."""

from __future__ import annotations

import random

import pytest

from fathom.eval.policies import TeacherPolicy
from fathom.policies.blocks import filter_cell, filter_plan, part_count_cell, part_count_plan
from fathom.policies.excerpts import Cut, cut_cell
from fathom.policies.grounding import check_trace
from fathom.policies.looking import Sight, read_question
from fathom.tasks import generate_task

BUNDLE = """Bundle of 3 files.

==> notes/red-fox.txt <==

The Fox ran. A fox, a FOX and foxes.

==> docs/blue-owl.md <==

The owl saw a fox.

==> notes/green-ant.rst <==

No animals here."""

CONFIG = """[a.eu-1]
pool-size = 60
; pool-size = 99

[b.eu-2]
inherits = a.eu-1

[c.us-3]
# a comment first
pool-size = 58

[d.us-4]
pool-size = 61
"""


def _run(cell: str, ctx: str) -> list:
    got: list = []
    exec(cell.split("```repl\n")[1].split("```")[0], {"ctx": ctx, "FINAL": got.append})
    return got


def _hits(ctx: str, terms: list[str]) -> dict[str, tuple[int, list[str]]]:
    lines = ctx.splitlines()
    return {t: (ctx.count(t), [line for line in lines if t in line][:4]) for t in terms}


def test_part_count_counts_the_word_per_headed_part_in_any_case():
    q = read_question(
        "Count the word 'fox' (whole word, any case) in notes/red-fox.txt, docs/blue-owl.md and "
        "notes/green-ant.rst. Which has the most?"
    )
    sight = Sight(head=BUNDLE)
    p = part_count_plan(q, sight, _hits(BUNDLE, list(q.anchors)))
    assert p is not None and p.parts == ("notes/red-fox.txt", "docs/blue-owl.md", "notes/green-ant.rst")
    assert (p.word, p.prefixes, p.pick, p.ignore_case) == ("fox", ("==> ",), "max", True)
    assert _run(part_count_cell(random.Random(0), p), BUNDLE) == ["notes/red-fox.txt"]  # 3 vs 1 vs 0
    # No "most"/"least": nothing to compare, no plan.
    plain = read_question("Does 'fox' occur in notes/red-fox.txt and docs/blue-owl.md?")
    assert part_count_plan(plain, sight, _hits(BUNDLE, list(plain.anchors))) is None


def test_filter_lists_the_blocks_whose_own_setting_passes_the_questions_test():
    above = read_question("Which sections set pool-size to a value greater than 58? List every section name.")
    f = filter_plan(above, _hits(CONFIG, ["pool-size"]))
    assert (f.term, f.op, f.value) == ("pool-size", ">", "58")
    # The commented 99 sets nothing, b.eu-2 only inherits, c.us-3 is exactly 58.
    assert _run(filter_cell(random.Random(0), f), CONFIG) == [["a.eu-1", "d.us-4"]]
    equal = read_question("List all sections whose own pool-size setting is 58.")
    assert _run(filter_cell(random.Random(1), filter_plan(equal, _hits(CONFIG, ["pool-size"]))), CONFIG) == [
        ["c.us-3"]
    ]
    # A camel-case key the question words split ('Retries') is found as a setting in the hit lines.
    camel = read_question("Name every section with an explicit maxRetries strictly greater than 3.")
    ctx = "[x.a-1]\nmaxRetries = 4\n\n[y.b-2]\nmaxRetries = 3\n\n[z.c-3]\nmaxRetries = 9\n"
    f = filter_plan(camel, _hits(ctx, ["Retries"]))
    assert (f.term, f.op, f.value) == ("maxRetries", ">", "3")
    assert _run(filter_cell(random.Random(2), f), ctx) == [["x.a-1", "z.c-3"]]
    # Not a request for names: no filter.
    assert filter_plan(read_question("What is pool-size in a.eu-1?"), _hits(CONFIG, ["pool-size"])) is None


def test_a_scoped_cut_keeps_a_named_headings_section_and_the_next_heading():
    ctx = "# tool\n\n## cmd a\n\ntext\n\n**Options**\n| x | y |\n\n## cmd b\n\nmore\n"
    cell = cut_cell(random.Random(0), Cut(("cmd a",), paragraph=30, follow=True, scope=("## ",)))
    env = {"ctx": ctx}
    exec(cell.split("```repl\n")[1].split("```")[0], env)
    kept = [env["lines"][i] for i in env["kept"]]
    assert kept == ["## cmd a", "", "text", "", "**Options**", "| x | y |", "", "## cmd b"]


LONG = ("config_sections", "bundle_compare", "config_lookup", "manual_default")


@pytest.fixture(scope="module")
def long_rows():
    # At 128K the reading moves used to run out of turns on these; the trained student has 10 turns.
    tasks = [generate_task(f, 11, 131_072, "medium") for f in LONG]
    return TeacherPolicy(max_turns=10).run(tasks)


def test_the_teacher_solves_long_config_bundle_and_manual_tasks_within_ten_turns(long_rows):
    assert [(r["family"], r["correct"]) for r in long_rows] == [(f, True) for f in LONG]
    assert all(r["turns"] <= 10 and check_trace(r["trace"]).ok for r in long_rows)
    assert max(r["turns"] for r in long_rows[:2]) <= 4  # the counts and filters are computed, not read
