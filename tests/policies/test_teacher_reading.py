"""The teacher's reading moves: tables parsed in code, cuts read by llm() and combined, on the new families."""

from __future__ import annotations

import contextlib
import io
import random

import pytest

from fathom.eval.policies import TeacherPolicy
from fathom.policies.excerpts import Cut, combine, cut_cell, parse_replies
from fathom.policies.looking import Sight, read_question
from fathom.policies.tabular import plan, table_cell, table_shape
from fathom.policies.teacher import parse_hits, parse_ids, teacher_turn
from fathom.tasks import generate_task

HEAD = """# export of 4 shards
dept;salary;city;id
Sales;100;Rome;E1
Support;;Oslo;E2
Sales;250;Oslo;E3
Support;40;Rome;E4"""


def test_the_table_plan_reads_columns_values_and_operation_from_the_question():
    shape = table_shape(Sight(head=HEAD))
    assert shape is not None and shape.delimiter == ";" and shape.numeric == {"salary"}
    p = plan(read_question("What is the least 'salary' among rows where 'dept' is 'Sales'?"), shape)
    assert (p.op, p.num, p.cond, p.values) == ("min", "salary", "dept", ("Sales",))
    top = plan(
        read_question("Among rows with 'city' = 'Oslo', which has the top 'salary'? Give its 'id'."), shape
    )
    assert (top.op, top.cond, top.report) == ("argmax", "city", "id")
    assert plan(read_question("What is the capital of 'Sales'?"), shape) is None  # no numeric column named


HEAD_NA = """# export
dept|max temp|city|id
Sales|100|Rome|E1
Support|NA|Oslo|E2
Sales|NA|Oslo|E3
Support|40|Rome|E4
Sales|250|Oslo|E5"""


@pytest.mark.parametrize(
    ("question", "op", "where", "answer"),
    [
        # two values of one column are either-or; values of two columns must both hold
        (
            "Total 'max temp' for 'city' in ('Oslo', 'Rome'): what is it?",
            "sum",
            (("city", ("Oslo", "Rome")),),
            390,
        ),
        (
            "What is the sum of 'max temp' over the rows where 'dept' is 'Sales' and 'city' is 'Oslo'?",
            "sum",
            (("dept", ("Sales",)), ("city", ("Oslo",))),
            250,
        ),
        ("Compute max('max temp') - min('max temp') restricted to 'dept' == 'Sales'.", "range", None, 150),
        (
            "For 'dept' = 'Sales', take the greatest 'max temp' and subtract the least one. Result?",
            "range",
            None,
            150,
        ),
        ("Count the rows whose 'dept' is 'Sales' and whose 'max temp' is under 200.", "count_below", None, 1),
        # a column named 'max temp' asks for no maximum, and 'age' inside 'average' is no column
        ("What is the sum of 'max temp' over the rows where 'city' is 'Rome'?", "sum", None, 140),
        ("What is the average 'max temp' over the rows where 'city' is 'Oslo'?", "mean", None, 250),
        (
            "Take the 'max temp' total of the 'Sales' rows (column 'dept') and subtract the 'Support' total.",
            "difference",
            (("dept", ("Sales", "Support")),),
            310,
        ),
        (
            "By how much does the sum of 'max temp' for 'dept' 'Support' exceed the sum for 'Sales'?",
            "difference",
            (("dept", ("Support", "Sales")),),
            -310,
        ),
        # which of two values has the larger (smaller) total: the value, not a number
        (
            "Between 'Rome' and 'Oslo' (column 'city'), which has the greater sum of 'max temp'?",
            "larger",
            None,
            "Oslo",
        ),
        (
            "Summing 'max temp' per 'city', is the total lower for 'Rome' or for 'Oslo'?",
            "smaller",
            None,
            "Rome",
        ),
        # whether any row passes a threshold: found / not found, never a count
        (
            "Is there any row where 'dept' is 'Sales' and 'max temp' is greater than 240?",
            "exists_above",
            None,
            "found",
        ),
        (
            "Search for a row with 'city' exactly 'Rome' and 'max temp' strictly above 150.",
            "exists_above",
            None,
            "not found",
        ),
        (
            "Does the table contain a row with 'dept' = 'Support' whose 'max temp' is below 50?",
            "exists_below",
            None,
            "found",
        ),
    ],
)
def test_the_table_plan_composes_its_filter_and_operation_from_the_question(question, op, where, answer):
    # 'max temp' is numeric though two of its five sampled cells are NA: empty markers are not words
    shape = table_shape(Sight(head=HEAD_NA))
    assert shape is not None and shape.numeric == {"max temp"}
    p = plan(read_question(question), shape)
    assert p is not None and p.op == op and p.num == "max temp"
    if where is not None:
        assert p.where == where
    code = table_cell(random.Random(0), shape, p).split("```repl\n")[1].split("```")[0]
    answers = []
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"ctx": HEAD_NA, "FINAL": answers.append})
    assert answers == [answer]


def test_the_table_cell_writes_no_line_that_mixes_quote_styles_and_computes_the_answer():
    # run 12's student wrote the progress line's 'wind', "and a number" as 'wind", "and a number" (table_aggregate
    # 58% in run 11, 0% in run 12): a line that alternates ' and " literals is one it mis-copies
    shape = table_shape(Sight(head=HEAD))
    assert shape is not None
    p = plan(read_question("What is the total 'salary' among rows where 'dept' is 'Sales'?"), shape)
    assert p is not None
    code = table_cell(random.Random(0), shape, p).split("```repl\n")[1].split("```")[0]
    assert not [line for line in code.splitlines() if "'" in line and '"' in line and "print(" in line]
    answers = []
    exec(code, {"ctx": HEAD, "FINAL": answers.append})
    assert answers == [350]


def test_parse_hits_reads_terms_printed_with_either_quote():
    obs = "\"thou'rt not\": 1 hits\n    line one\n'x': 0 hits\n"
    assert parse_hits(obs) == {"thou'rt not": (1, ["line one"]), "x": (0, [])}


def test_cut_cell_runs_and_keeps_the_hit_paragraph_and_followed_identifiers():
    ctx = "[a.x-1]\nk = 1\ninherits = b.y-2\n\n[c.z-3]\nk = 3\n\n[b.y-2]\nk = 2\nj = 5\n"
    code = cut_cell(random.Random(0), Cut(("a.x-1",), paragraph=30, follow=True)).split("```repl\n")[1]
    env = {"ctx": ctx}
    exec(code.split("```")[0], env)  # the cell is plain Python over ctx
    kept = [env["lines"][i] for i in env["kept"]]
    assert kept == ["[a.x-1]", "k = 1", "inherits = b.y-2", "[b.y-2]", "k = 2", "j = 5"]


def test_a_quoted_phrase_with_an_apostrophe_is_searched_by_its_longest_part_without_one():
    q = read_question("Which file includes \"can hurt me -- I've got them\" in its text? Also 'Sky'.")
    assert q.quoted == ("can hurt me -- I've got them", "Sky")  # the question's own reading is unchanged
    assert q.searched == ("can hurt me -- I", "Sky")
    assert all("'" not in t for t in q.searched) and "can hurt me -- I" in q.quoted[0]
    assert read_question('Find "o\'er" now.').searched == ("o'er",)  # no part of 8 characters: kept whole


def test_a_cut_without_keys_keeps_every_line_in_a_form_the_student_copies():
    # `set(range(len(lines)))` ends in Qwen2.5's rare ")))\n" token: run 11's student wrote "))\n" (its
    # common neighbour) every time, 4 of 4, and the episode ended in a SyntaxError and its NameErrors
    cell = cut_cell(random.Random(0), Cut(())).split("```repl\n")[1].split("```")[0]
    assert not any(line.rstrip().endswith(")))") for line in cell.splitlines())
    env = {"ctx": "a\n\nb\nc"}
    exec(cell, env)
    assert env["kept"] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("question", "replies", "final"),
    [
        ("How many rows are there?", ["3", "4"], 7),
        ("Is any section disabled? Reply yes or no.", ["no", "yes"], "yes"),
        ("Which sections set x? List every section name.", ["a, b", "c"], ["a", "b", "c"]),
        ("What is the lowest value?", ["7", "3"], "3"),
    ],
)
def test_combine_reduces_per_chunk_replies_as_the_question_asks(question, replies, final):
    turn = combine(random.Random(0), read_question(question), replies, len(replies) + 1)
    # the thought says what the printout showed: how many replies answered, of how many
    assert turn.startswith(f"Replies with an answer: {len(replies)} of {len(replies) + 1}. ")
    code = _code(turn)
    assert _finals(code, replies) == [final]
    # the same cell drops the chunks that lack the answer, and submits nothing when every chunk does
    assert _finals(code, [*replies, "not found in this text"]) == [final]
    assert _finals(code, ["Not found in this text."] * 3) == []
    assert parse_replies(f"replies: {replies!r}") == replies


def _code(turn: str) -> str:
    return turn.split("```repl\n")[1].split("```")[0]


def _finals(code: str, replies: list[str]) -> list:
    got: list = []
    exec(code, {"replies": replies, "FINAL": got.append})
    return got


NEW = ("table_aggregate", "config_lookup", "glossary_lookup", "manual_default", "bundle_locate", "chat_count")


@pytest.fixture(scope="module")
def rows():
    return TeacherPolicy().run([generate_task(f, 7, 8192) for f in NEW])


def test_the_teacher_solves_new_families_grounded_without_knowing_them(rows):
    assert [(r["family"], r["correct"], r["grounded"]) for r in rows] == [(f, True, True) for f in NEW]


def test_a_comma_before_a_count_noun_is_not_a_stated_total():
    # "notifier-api, entries later than ...": the comma alone once parsed as a number and crashed the teacher
    question = read_question(
        "Service notifier-api, entries later than 2024-05-19 07:18:26: how many are DEBUG?"
    )
    assert question.stated_total is None and question.count
    assert read_question("Among the rows: of the 3,744 questions, how many?").stated_total == 3744


def test_the_follow_and_cut_thoughts_name_what_they_keep_and_why():
    from fathom.policies.moves import follow

    # the thought names the ids followed and the rule that makes a term one (the student never sees the parse)
    for seed in range(3):
        text = follow(random.Random(seed), ["ORD-7", "INV-12"], 6).split("```repl")[0]
        assert "'ORD-7', 'INV-12'" in text and "a digit, dash or capitals" in text
    for seed in range(2):
        text = cut_cell(random.Random(seed), Cut(("sync_island", "x" * 40), paragraph=30)).split("```repl")[0]
        assert "'sync_island', 'xxxxxxxxxxxxxxxxx...'" in text  # a long term is cut in the prose only
    # a thought is drawn from a tuple of the same size whatever the names: the cells after it stay as they were
    a, b = random.Random(5), random.Random(5)
    follow(a, ["ORD-7"], 6)
    assert "'A-1', 'B-2', 'C-3' and 1 more" in follow(b, ["A-1", "B-2", "C-3", "D-4"], 6)
    assert a.random() == b.random()


def test_the_teacher_follows_ids_only_when_its_search_printed_them_found():
    # whether to follow is read off the search cell's own "ids found:" line, not off a parse the student never
    # sees: the same question and hits give a follow with the line listing the id and none with it empty
    first = (
        "Question: Which orders did the customer of order ORD-4242 place in Lyon?\n\n"
        "`ctx` is a str of 1,000 characters (about 250 tokens).\nStart."
    )
    look = "[output]\n1000 chars, 3 lines\n--- head ---\norder ORD-4242 customer C-77 city Lyon\n\n[turn 1/10; 9 left]"
    line = "order ORD-4242 customer C-77 city Lyon"
    hits = f"'ORD-4242': 1 hits\n    {line}\n'Lyon': 1 hits\n    {line}"

    def after_search(ids_line: str) -> str:
        search = f"[output]\n{ids_line}\n{hits}\n\n[turn 2/10; 8 left]"
        return f"<s>{first}</s><a>look</a><u>{look}</u><a>search</a><u>{search}</u><a>"

    assert parse_ids("ids found: ['ORD-4242', 'C-77']\n'x': 0 hits") == ["ORD-4242", "C-77"]
    assert parse_ids("'x': 0 hits") == []
    follow = teacher_turn(after_search("ids found: ['ORD-4242']"))
    assert "todo, done, reached = ['ORD-4242']" in follow
    assert "todo" not in teacher_turn(after_search("ids found: []"))


def test_the_search_cell_prints_the_found_one_word_terms_shaped_like_ids():
    from fathom.policies.moves import search

    terms = ["ORD-4242", "Lyon", "sync_pine", "GLOSSARY", "--color-max", "two words-x", "C-77", "absent-9"]
    ctx = "ORD-4242 Lyon sync_pine GLOSSARY --color-max two words-x C-77"
    for seed in range(4):
        code = search(random.Random(seed), terms).split("```repl\n")[1].split("```")[0]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(code, {"ctx": ctx})
        assert parse_ids(out.getvalue()) == ["ORD-4242", "GLOSSARY", "C-77"]
        assert parse_hits(out.getvalue())["absent-9"] == (0, [])


def test_the_combine_cell_drops_replies_that_only_repeat_a_name_the_question_gave():
    # run 16's student wrote the combine cell after its reader handed back 'sync_island' and submitted it: the
    # teacher skipped that cell on such replies, a check the copied cell did not carry
    q = read_question("Who calls sync_island()? Give the calling function's name.")
    turn = combine(random.Random(0), q, ["sync_island", "pack_fox"], 3)
    assert turn.startswith("Replies with an answer: 1 of 3. ")
    code = _code(turn)
    assert _finals(code, ["sync_island", "pack_fox", "not found in this text"]) == ["pack_fox"]
    assert _finals(code, ["Sync_Island ", "not found in this text"]) == []
    # a count is not a name: the per-chunk counts are added up whatever the question names
    count = _code(combine(random.Random(0), read_question("How many lines mention ORD-7?"), ["2", "3"], 2))
    assert _finals(count, ["2", "3"]) == [5]
