"""The teacher's table move: a delimited table seen in the head is parsed in code, never read by llm().

`table_shape(sight)` reads the look move's printout for a header row (the first non-comment line, whose
delimiter, one of ``, ; | tab``, splits the following lines into as many cells) and which columns hold
numbers in the sampled rows. `plan(q, shape)` matches the question's quoted names to that header: the
columns it names, the values it filters on (each with the column quoted nearest before it: two values of
one column are either-or, values of two columns must both hold), the column it asks to report, and the
operation its words ask for (a total, least, greatest, mean, range, a count above or below a threshold,
whether any row passes one, the difference of two totals or which of two is larger or smaller, or the row
with the top or bottom value). `table_cell(rng, shape, plan)` writes the cell from those parts: `csv` parses
every row with as many cells as the header, the filter and the arithmetic run in code, and it FINALs.

It knows no generator: columns and values are the question's own quoted words, the delimiter and header
are what the look printed. This module only writes text.
"""

from __future__ import annotations

import csv
import random
import re
from dataclasses import dataclass

from fathom.policies.looking import LEAST, MOST, Question, Sight
from fathom.policies.moves import turn

DELIMITERS = (",", ";", "|", "\t")
_EMPTY = ("", "na", "n/a", "null", "none", "-")  # cells a numeric column leaves without a value
_MORE = r"\b(larger|more|higher|greater|bigger)\b"
_FEWER = r"\b(smaller|less|lower|fewer)\b"
_RANGE = r"\brange\b|\bspread\b|how far apart|max\([^)]*\) - min\(|\b(greatest|highest|largest|maximum)\b.*\bsubtract"
_TWO_TOTALS = ("difference", "larger", "smaller")  # ops on the totals of two values of one column


@dataclass(frozen=True)
class Shape:
    delimiter: str
    header: list[str]
    numeric: set[str]  # columns whose sampled cells are mostly integers


@dataclass(frozen=True)
class Plan:
    # sum, min, max, mean, range, count_above, count_below, difference, argmax, argmin; larger / smaller (which
    # of two values has the larger / smaller total), exists_above / exists_below (any row past a threshold)
    op: str
    num: str
    where: tuple[tuple[str, tuple[str, ...]], ...]  # (column, its values) in the question's order
    report: str = ""  # the column an arg-max / arg-min answers with
    threshold: int = 0

    @property
    def cond(self) -> str:
        return self.where[0][0]

    @property
    def values(self) -> tuple[str, ...]:
        return self.where[0][1]


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
        cells = [r[i] for r in data if r[i].strip().lower() not in _EMPTY]
        if cells and sum(bool(re.fullmatch(r"-?\d+", c)) for c in cells) >= 0.8 * len(cells):
            numeric.add(name)
    return Shape(delimiter, header, numeric)


def _filters(quoted: tuple[str, ...], others: list[str]) -> dict[str, tuple[str, ...]]:
    """Each quoted value under the categorical column quoted nearest before it (else nearest after it)."""
    where: dict[str, tuple[str, ...]] = {}
    for i, v in enumerate(quoted):
        if v in others:
            continue
        before = [c for c in quoted[:i] if c in others]
        after = [c for c in quoted[i + 1 :] if c in others]
        col = before[-1] if before else after[0] if after else None
        if col and v not in where.get(col, ()):
            where[col] = (*where.get(col, ()), v)
    return where


def plan(q: Question, shape: Shape) -> Plan | None:
    columns = [c for c in dict.fromkeys(q.quoted) if c in shape.header]
    nums = [c for c in columns if c in shape.numeric]
    others = [c for c in columns if c not in shape.numeric]
    quoted = tuple(c for c in q.quoted if c not in nums)
    where = _filters(quoted, others)
    if not nums or not where:
        return None
    lower = q.text.lower()
    for name in q.quoted:  # a column named 'Max Temp' asks for no maximum
        lower = lower.replace(f"'{name.lower()}'", "''").replace(f'"{name.lower()}"', '""')
    report = next((c for c in others if c not in where), "")
    num = nums[0]
    above = re.search(r"(?:greater than|exceeds|above|>)\s*(-?\d+)", lower)
    below = re.search(r"(?:less than|lower than|under|below|<)\s*(-?\d+)", lower)
    counting = re.search(r"how many|count|number of", lower)
    two_values = any(len(vs) >= 2 for vs in where.values())
    existence = re.search(r"\bis there\b|\bany\b|\bexists?\b|\bcontain|\bwhether\b|\bsearch for\b", lower)
    if two_values and re.search(r"\bwhich\b|\bor for\b", lower) and re.search(_MORE + "|" + _FEWER, lower):
        op = "larger" if re.search(_MORE, lower) else "smaller"
    elif existence and (above or below) and not counting:
        op = "exists_above" if above else "exists_below"
    elif report and re.search(MOST, lower):
        op = "argmax"
    elif report and re.search(LEAST, lower):
        op = "argmin"
    elif two_values and re.search(r"subtract|minus|difference|\) - |exceeds? the\b", lower):
        op = "difference"
    elif re.search(_RANGE, lower):
        op = "range"
    elif above and counting:
        op = "count_above"
    elif below and counting:
        op = "count_below"
    elif re.search(r"average|mean|avg", lower):
        op = "mean"
    elif re.search(LEAST, lower):
        op = "min"
    elif re.search(MOST, lower):
        op = "max"
    elif re.search(r"total|sum|add up|adds up", lower):
        op = "sum"
    else:
        return None
    threshold = (
        above
        if op in ("count_above", "exists_above")
        else below
        if op in ("count_below", "exists_below")
        else None
    )
    if op in _TWO_TOTALS:  # only the column holding both values filters: the cell totals each value apart
        col = next(c for c, vs in where.items() if len(vs) >= 2)
        where = {col: where[col]}
    return Plan(op, num, tuple(where.items()), report, int(threshold.group(1)) if threshold else 0)


def table_cell(rng: random.Random, shape: Shape, p: Plan) -> str:
    w = p.values[-1]
    result = {
        "sum": "sum(vals)",
        "min": "min(vals)",
        "max": "max(vals)",
        "mean": "round(sum(vals) / len(vals), 2)",
        "range": "max(vals) - min(vals)",
        "count_above": f"sum(1 for x in vals if x > {p.threshold})",
        "count_below": f"sum(1 for x in vals if x < {p.threshold})",
        "difference": f"sum(vals) - sum(number(r[n]) for r in rows if r[c] == {w!r} "
        "and number(r[n]) is not None)",
        "exists_above": f"'found' if any(x > {p.threshold} for x in vals) else 'not found'",
        "exists_below": f"'found' if any(x < {p.threshold} for x in vals) else 'not found'",
    }
    # one index and one test a filtered column: c for the first, c2 for a second; a difference or comparison
    # keeps the first value's rows in `picked` and sums the last value's in its own expression
    names = ["c" if i == 0 else f"c{i + 1}" for i in range(len(p.where))]
    tests = [
        f"r[{name}] == {vs[0]!r}" if len(vs) == 1 or p.op in _TWO_TOTALS else f"r[{name}] in {vs!r}"
        for name, (_, vs) in zip(names, p.where, strict=True)
    ]
    indices = ", ".join(f"header.index({col!r})" for col, _ in p.where)
    if p.op in ("larger", "smaller"):
        a, pick = p.values[0], ">" if p.op == "larger" else "<"
        compute = f"""other = sum(number(r[n]) for r in rows if r[c] == {w!r} and number(r[n]) is not None)
print({a!r}, sum(vals), "|", {w!r}, other)
FINAL({a!r} if sum(vals) {pick} other else {w!r})"""
    elif p.op in ("argmax", "argmin"):
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
{", ".join(names)}, n = {indices}, header.index({p.num!r})
picked = [r for r in rows if {" and ".join(tests)} and number(r[n]) is not None]
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
