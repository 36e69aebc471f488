"""Delimited tables, comparisons: `table_compare` (compare two groups, existence, arg-max).

The documents are `fathom.tasks.tables` tables (themes, delimiters, quoting, header spelling, noise rows,
empty cells). Kinds, five phrasings each:

- ``which``: which of two values of a categorical column has the larger total of an integer column
  (exact: one of the two values; the totals always differ);
- ``diff``: the total for value A minus the total for value B (numeric, may be negative);
- ``exists``: is there a row with the categorical value A and the integer strictly above T ("found" / "not found"; for
  "no", T is at or above A's maximum while other values' rows exceed it, so ignoring the condition fails);
- ``top``: the id of the row with the largest integer among rows with value A (exact; the maximum is
  made unique).

Look-alike values ("North" / "North-East") are the usual pair of a ``which`` or ``diff`` question at medium
and hard. For an expert: `tables.read_table` reads the table and `CMP_KINDS` parse questions. This module
does not render tables (see `fathom.tasks.tables`).
"""

from __future__ import annotations

import random

from fathom.tasks import formats, tables
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Task
from fathom.tasks.tables import column, number

# Existence is answered with words of this family only, so no other family's "yes" / "no" gold fits.
EXISTS_ANSWERS = ("found", "not found")
_FOUND = " Answer 'found' or 'not found'."
_T = {"num": r"[^']+", "cat": r"[^']+", "a": r"[^']+", "b": r"[^']+", "t": r"-?\d+", "id": r"[^']+"}
CMP_KINDS = {
    "which": Phrasings(
        (
            "Which has the larger total '{num}': rows with '{cat}' = '{a}' or rows with '{cat}' = '{b}'? "
            "Answer with '{a}' or '{b}'.",
            "Comparing '{cat}' values '{a}' and '{b}', which one adds up to more '{num}'? Reply with the value.",
            "Summing '{num}' per '{cat}', is the total higher for '{a}' or for '{b}'?",
            "Between '{a}' and '{b}' (column '{cat}'), which has the greater sum of '{num}'? Name it.",
            "Total '{num}' of '{cat}' '{a}' versus '{cat}' '{b}': which is bigger? Answer '{a}' or '{b}'.",
        ),
        _T,
    ),
    "diff": Phrasings(
        (
            "What is the total '{num}' of rows with '{cat}' = '{a}' minus the total for '{cat}' = '{b}'? "
            "Answer with a number (it may be negative).",
            "By how much does the sum of '{num}' for '{cat}' '{a}' exceed the sum for '{b}'? Give a signed number.",
            "Compute sum('{num}' where '{cat}' == '{a}') - sum('{num}' where '{cat}' == '{b}').",
            "Take the '{num}' total of the '{a}' rows (column '{cat}') and subtract the '{b}' total. Result?",
            "Difference of '{num}' totals, '{cat}' '{a}' minus '{cat}' '{b}': what is it? One number.",
        ),
        _T,
    ),
    "exists": Phrasings(
        (
            "Is there any row where '{cat}' is '{a}' and '{num}' is greater than {t}?" + _FOUND,
            "Does the table contain a row with '{cat}' = '{a}' whose '{num}' exceeds {t}?" + _FOUND,
            "Search for a row with '{cat}' exactly '{a}' and '{num}' strictly above {t}." + _FOUND,
            "Among the rows with '{cat}' '{a}', does any have '{num}' > {t}?" + _FOUND,
            "Check whether a '{cat}' = '{a}' row with '{num}' above {t} exists." + _FOUND,
        ),
        _T,
    ),
    "top": Phrasings(
        (
            "Which '{id}' belongs to the row with the largest '{num}' among rows where '{cat}' is '{a}'? "
            "Answer with the id.",
            "Among rows with '{cat}' = '{a}', give the '{id}' of the row whose '{num}' is highest.",
            "Find the '{cat}' '{a}' row with the maximum '{num}'. What is its '{id}'?",
            "Restricted to '{cat}' == '{a}', which row has the top '{num}'? Reply with its '{id}' only.",
            "What '{id}' has the greatest '{num}' of all rows whose '{cat}' equals '{a}'?",
        ),
        _T,
    ),
}
CMP_WEIGHTS = (0.1, 0.45, 0.1, 0.35)  # which / exists are coin flips for a blind policy: keep them rare


def total(header: list[str], rows: list[list[str]], cat: str, value: str, num: str) -> int:
    pairs = zip(column(header, rows, cat), column(header, rows, num), strict=True)
    return sum(n for c, cell in pairs if c == value and (n := number(cell)) is not None)


def answer_of(kind: str, header: list[str], rows: list[list[str]], s: dict[str, str]) -> str | int:
    if kind in ("which", "diff"):
        ta, tb = (total(header, rows, s["cat"], s[k], s["num"]) for k in ("a", "b"))
        if kind == "diff":
            return ta - tb
        if ta == tb:
            raise InvalidTaskError(f"both totals are {ta}")
        return s["a"] if ta > tb else s["b"]
    cells = zip(column(header, rows, s["cat"]), column(header, rows, s["num"]), strict=True)
    values = [(number(n), i) for i, (c, n) in enumerate(cells) if c == s["a"] and number(n) is not None]
    if not values:
        raise InvalidTaskError(f"no row has {s['cat']} = {s['a']}")
    if kind == "exists":
        return EXISTS_ANSWERS[0] if any(v > int(s["t"]) for v, _ in values) else EXISTS_ANSWERS[1]
    best = max(v for v, _ in values)
    at = find_one([i for v, i in values if v == best], "row with the largest value")
    return column(header, rows, s["id"])[at]


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"table_compare/{seed}")
    kind = rng.choices(tuple(CMP_KINDS), CMP_WEIGHTS)[0]
    theme, style, table, _ = tables.setup(rng, "table_compare", length_tokens, difficulty, corpora)
    ci = rng.randrange(2)
    values = theme.cats[ci][1]
    num = rng.choice(table.num_cols)
    a = rng.choice(tables.present_values(table, table.cat_cols[ci], num))
    alike = [v for v in values if v != a and (v.startswith(a[:4]) or a.startswith(v[:4]))]
    b = rng.choice(alike if alike and difficulty != "easy" else [v for v in values if v != a])
    s = {"cat": table.cat_cols[ci], "num": num, "a": a, "b": b, "id": table.id_col}
    header, rows = table.header, table.rows
    ni, ci_col = header.index(s["num"]), header.index(s["cat"])
    mine = [i for i, r in enumerate(rows) if r[ci_col] == a and number(r[ni]) is not None]
    if not mine:
        raise InvalidTaskError(f"table_compare/{seed}: no row of {a}")
    if kind == "which" and total(header, rows, s["cat"], a, s["num"]) == total(
        header, rows, s["cat"], b, s["num"]
    ):
        rows[mine[0]][ni] = str(int(rows[mine[0]][ni]) + 1)  # totals must differ
    if kind == "top":  # a unique maximum: raise one row above the rest
        best = max(int(rows[i][ni]) for i in mine)
        rows[rng.choice(mine)][ni] = str(best + rng.randint(1, 5))
    if kind == "exists":
        best = max(int(rows[i][ni]) for i in mine)
        s["t"] = str(best - rng.randint(1, 3) if rng.random() < 0.5 else best + rng.randint(0, 2))
    document = tables.render(rng, table, style)
    question = CMP_KINDS[kind].write(rng, **s)
    answer = answer_of(kind, header, rows, s)
    metric = "numeric" if kind == "diff" else "exact"
    meta = {"kind": kind, "rows": len(rows), "delimiter": style.delimiter, "case": style.case}
    return make_task(
        "table_compare", seed, length_tokens, difficulty, question, answer, metric, document, meta
    )


def solve(question: str, document: str) -> str | int:
    kind, s = formats.parse_kind(CMP_KINDS, question)
    header, rows = tables.read_table(document)
    return answer_of(kind, header, rows, s)


def wrong_answers(task: Task, document: str) -> list[str | int]:
    kind, s = formats.parse_kind(CMP_KINDS, task.question)
    if kind == "diff":
        gold = int(task.answer)  # type: ignore[arg-type]
        return [-gold if gold else 1, gold + 1, gold - 1, "none"]
    if kind == "which":
        return [s["b"] if task.answer == s["a"] else s["a"], "both", ""]
    if kind == "exists":
        return [*(a for a in EXISTS_ANSWERS if a != task.answer), "yes", "no", ""]
    header, rows = tables.read_table(document)
    ids = column(header, rows, s["id"])
    return [i for i in ids[:3] if i != task.answer] + [""]


FAMILY = Family(
    "table_compare",
    "delimited tables: compare two groups' totals, existence of a row, arg-max id",
    generate,
    solve,
    wrong_answers,
    True,
)
