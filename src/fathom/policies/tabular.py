"""The teacher's table move: a delimited table seen in the head is parsed in code, never read by llm().

`table_shape(sight)` reads the look move's printout for a header row (the first non-comment line, whose
delimiter, one of ``, ; | tab``, splits the following lines into as many cells) and which columns hold
numbers in the sampled rows. `plan(q, shape)` matches the question's quoted names to that header: the
columns it names, the values it filters on, the column it asks to report, and the operation its words
ask for (a total, least, greatest, mean, a count above a threshold, the difference of two totals, or the
row with the top or bottom value). `table_cell(rng, shape, plan)` writes the cell: `csv` parses every
row with as many cells as the header, the filter and the arithmetic run in code, and it FINALs.

It knows no generator: columns and values are the question's own quoted words, the delimiter and header
are what the look printed. This module only writes text.
"""

from __future__ import annotations

import csv
import random
import re
from dataclasses import dataclass

from fathom.policies.looking import Question, Sight
from fathom.policies.moves import turn

DELIMITERS = (",", ";", "|", "\t")
_LEAST = r"\b(least|lowest|smallest|minimum|min|bottom|fewest)\b"
_MOST = r"\b(most|highest|largest|greatest|maximum|max|top|biggest)\b"


@dataclass(frozen=True)
class Shape:
    delimiter: str
    header: list[str]
    numeric: set[str]  # columns whose sampled cells are mostly integers


@dataclass(frozen=True)
class Plan:
    op: str  # sum, min, max, mean, count_above, difference, argmax, argmin
    num: str
    cond: str
    values: tuple[str, ...]
    report: str = ""  # the column an arg-max / arg-min answers with
    threshold: int = 0


def table_shape(sight: Sight) -> Shape | None:
    rows = [line for line in sight.head.splitlines() if line.strip() and not line.startswith("#")]
    if len(rows) < 4:
        return None
    delimiter = max(DELIMITERS, key=rows[0].count)
    header = next(csv.reader([rows[0]], delimiter=delimiter))
    if len(header) < 3:
        return None
    data = [r for r in csv.reader(rows[1:], delimiter=delimiter) if len(r) == len(header) and r != header]
    if len(data) < 3:
        return None
    numeric = set()
    for i, name in enumerate(header):
        cells = [r[i] for r in data if r[i].strip()]
        if cells and sum(bool(re.fullmatch(r"-?\d+", c)) for c in cells) >= 0.8 * len(cells):
            numeric.add(name)
    return Shape(delimiter, header, numeric)


def plan(q: Question, shape: Shape) -> Plan | None:
    columns = [c for c in dict.fromkeys(q.quoted) if c in shape.header]
    values = tuple(v for v in dict.fromkeys(q.quoted) if v not in shape.header)
    nums = [c for c in columns if c in shape.numeric]
    others = [c for c in columns if c not in shape.numeric]
    if not nums or not values or not others:
        return None
    text, lower = q.text, q.text.lower()

    def beside(col: str) -> bool:  # 'col' == 'value', 'col' is 'value', 'col' exactly 'value'...
        return any(
            re.search(re.escape(f"'{col}'") + r"\W{0,3}(?:\w+\W{1,3}){0,2}'" + re.escape(v) + "'", text)
            for v in values
        )

    cond = next((c for c in others if beside(c)), others[0])
    report = next((c for c in others if c != cond), "")
    num = nums[0]
    threshold = re.search(r"(?:greater than|exceeds|above|>)\s*(-?\d+)", lower)
    if report and re.search(_MOST, lower):
        op = "argmax"
    elif report and re.search(_LEAST, lower):
        op = "argmin"
    elif len(values) >= 2 and re.search(r"subtract|minus|difference|\) - ", lower):
        op = "difference"
    elif threshold and re.search(r"how many|count|number of", lower):
        op = "count_above"
    elif re.search(r"average|mean|avg", lower):
        op = "mean"
    elif re.search(_LEAST, lower):
        op = "min"
    elif re.search(_MOST, lower):
        op = "max"
    elif re.search(r"total|sum|add up|adds up", lower):
        op = "sum"
    else:
        return None
    return Plan(op, num, cond, values, report, int(threshold.group(1)) if threshold else 0)


def table_cell(rng: random.Random, shape: Shape, p: Plan) -> str:
    v, w = p.values[0], p.values[-1]
    result = {
        "sum": "sum(vals)",
        "min": "min(vals)",
        "max": "max(vals)",
        "mean": "round(sum(vals) / len(vals), 2)",
        "count_above": f"sum(1 for x in vals if x > {p.threshold})",
        "difference": f"sum(vals) - sum(number(r[n]) for r in rows if r[c] == {w!r} "
        "and number(r[n]) is not None)",
    }
    if p.op in ("argmax", "argmin"):
        pick = "max" if p.op == "argmax" else "min"
        compute = f"""out = header.index({p.report!r})
best = {pick}(pairs)[0] if pairs else None
answer = [r[out] for r, x in zip(picked, vals) if x == best]
print(len(answer), "rows with the value", best, answer[:3])
FINAL(answer[0])"""
    else:
        compute = f"answer = {result[p.op]}\nprint(answer)\nFINAL(answer)"
    code = f"""
import csv
def number(cell):
    try:
        return int(cell)
    except ValueError:
        return None
lines = [line for line in ctx.splitlines() if line.strip() and line[0] != "#"]
reader = csv.reader(lines, delimiter={shape.delimiter!r})
table = list(reader)
header = table[0]
rows = [r for r in table[1:] if len(r) == len(header) and r != header]
c, n = header.index({p.cond!r}), header.index({p.num!r})
picked = [r for r in rows if r[c] == {v!r} and number(r[n]) is not None]
vals = [number(r[n]) for r in picked]
pairs = [(x, i) for i, x in enumerate(vals)]
print(len(rows), "rows;", len(vals), "picked, each with a number")
{compute}
"""
    return turn(
        rng,
        (
            "The document is a delimited table; I parse it with csv and compute the answer in code.",
            "A table with a header row: filter the rows the question names and do the arithmetic in code.",
            "This is tabular data, so no reading is needed: parse the rows, filter, aggregate.",
        ),
        code,
    )
