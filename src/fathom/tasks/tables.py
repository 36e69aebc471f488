"""Delimited tables (CSV / TSV / semicolon / pipe) and the `table_aggregate` family over them.

A document is one exported table: a header and one row per line. Per document the seed picks a theme
(`THEMES`: sales, weather readings, staff, shipments), the column order, the header spelling (snake,
kebab, camel, upper or title case), the delimiter (``,`` tab ``;`` ``|``), the quoting (only where needed,
or every field), and noise: ``#`` comment lines, blank lines and repeated header lines (the export came
in chunks), and at hard some empty numeric cells (written ``""``, ``NA`` or ``n/a`` per document). Every
theme has an id column, a date, two categorical columns whose values come in look-alike groups ("North",
"North-East", "Northwest"), two integer columns and a free-text column (lines of Shakespeare, so fields
hold the delimiter and quotes are real)::

    order_id,region,product,quantity,amount,note,date
    SO-104233,North-East,lantern,12,3480,"Now, fair Hippolyta, our nuptial hour",2024-03-05

``table_aggregate`` asks the sum / min / max / mean (rounded to 2 decimals) of an integer column over the
rows whose categorical column equals a value, how many such rows have the integer above (or below) a
threshold, or its range (largest minus smallest); and the total over rows whose categorical column holds
either of two values, or whose two categorical columns hold one value each (metric ``numeric``). So the code
that answers is written from the question's parts (a filter of one or two conditions, an operation), not
copied from one shape per family. Cells without a value never count. Five phrasings per kind.

For an expert: `read_table(document)` gives (header, rows) (it detects the delimiter and skips noise);
`AGG_KINDS` parse questions. The compare family over the same tables is `fathom.tasks.table_compare`.
"""

from __future__ import annotations

import datetime
import random
import statistics
from collections.abc import Sequence
from typing import NamedTuple

from fathom.tasks import formats
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Task


class Theme(NamedTuple):
    id_words: tuple[str, ...]
    id_prefix: str
    cats: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # (column words, values)
    nums: tuple[tuple[tuple[str, ...], int, int], ...]  # (column words, low, high)
    text_words: tuple[str, ...]


_REGIONS = ("North", "North-East", "Northwest", "South", "South-East", "Southwest", "East", "West", "Central")
_PRODUCTS = ("lantern", "lanterns", "kettle", "kettle-pro", "compass", "compass-mini", "anvil", "ladder")
_CITIES = ("Porto", "Portland", "Lyon", "Lyons", "Bergen", "Bergamo", "Oslo", "Osaka", "Cairo", "Cairns")
_SKIES = ("clear", "cloudy", "partly cloudy", "rain", "light rain", "fog", "snow", "wind")
_DEPTS = ("Sales", "Sales Ops", "Legal", "Research", "Research Labs", "Support", "Finance", "Facilities")
_SITES = ("Leeds", "Leiden", "Austin", "Aosta", "Dublin", "Dubai", "Perth", "Perm")
_CARRIERS = ("Northwind", "Northwind Express", "BlueLine", "Blue Line Cargo", "Atlas", "Atlas Freight")
_PORTS = ("Rotterdam", "Antwerp", "Hamburg", "Le Havre", "Valencia", "Genoa", "Gdansk")
THEMES = {
    "sales": Theme(
        ("order", "id"),
        "SO-",
        ((("region",), _REGIONS), (("product",), _PRODUCTS)),
        ((("quantity",), 1, 60), (("amount",), 5, 5000)),
        ("note",),
    ),
    "weather": Theme(
        ("reading", "id"),
        "WX",
        ((("station", "city"), _CITIES), (("sky",), _SKIES)),
        ((("rain", "mm"), 0, 90), (("max", "temp"), -15, 42)),
        ("observer", "remark"),
    ),
    "staff": Theme(
        ("employee", "id"),
        "E",
        ((("department",), _DEPTS), (("site",), _SITES)),
        ((("salary",), 28_000, 160_000), (("age",), 19, 67)),
        ("motto",),
    ),
    "shipments": Theme(
        ("shipment", "id"),
        "SH-",
        ((("carrier",), _CARRIERS), (("origin", "port"), _PORTS)),
        ((("weight", "kg"), 1, 2500), (("cost",), 10, 9000)),
        ("comment",),
    ),
}
DELIMITERS = (",", "\t", ";", "|")
MISSING = ("", "NA", "n/a")


class Table(NamedTuple):
    header: list[str]
    rows: list[list[str]]  # every cell as written (unquoted)
    cat_cols: list[str]  # header names of the two categorical columns
    num_cols: list[str]  # header names of the two integer columns
    id_col: str


class Style(NamedTuple):
    case: str
    delimiter: str
    quote_all: bool
    missing: str
    noise: float  # chance of a noise line after a row
    gaps: float  # chance that a numeric cell is empty


def draw_style(rng: random.Random, difficulty: str) -> Style:
    return Style(
        rng.choice(formats.CASE_STYLES),
        rng.choice(DELIMITERS),
        rng.random() < 0.3,
        rng.choice(MISSING),
        {"easy": 0.0, "medium": 0.01, "hard": 0.02}[difficulty],
        {"easy": 0.0, "medium": 0.0, "hard": 0.03}[difficulty],
    )


def make_table(
    rng: random.Random, theme: Theme, style: Style, n_chars: int, texts: Sequence[str], min_rows: int = 30
) -> Table:
    """Rows until the rendered table is about `n_chars` long (row length estimated from the first rows)."""
    name = lambda words: formats.styled(words, style.case)  # noqa: E731
    cat_cols = [name(w) for w, _ in theme.cats]
    num_cols = [name(w) for w, _, _ in theme.nums]
    id_col, date_col, text_col = name(theme.id_words), name(("date",)), name(theme.text_words)
    header = [id_col, *cat_cols, *num_cols, text_col, date_col]
    rng.shuffle(header)
    next_id = rng.randrange(100_000, 200_000)
    day0 = datetime.date(2023, 1, 1) + datetime.timedelta(days=rng.randrange(365))
    # Each document draws its own range inside the theme's, so a min / max / count is not pinned near
    # the theme's bounds (a blind guess of the usual minimum would otherwise land close every time).
    ranges = []
    for _, low, high in theme.nums:
        lo = low + rng.randrange((high - low) // 2 + 1)
        ranges.append((lo, high - rng.randrange((high - lo) // 3 + 1)))
    rows: list[list[str]] = []
    per_row = 60.0
    while len(rows) < max(min_rows, n_chars / per_row):
        next_id += rng.randint(1, 9)  # ascending, unique, not dense
        cell = {id_col: f"{theme.id_prefix}{next_id}", text_col: rng.choice(texts)}
        cell[date_col] = (day0 + datetime.timedelta(days=len(rows) // 40)).isoformat()
        for col, (_, values) in zip(cat_cols, theme.cats, strict=True):
            cell[col] = rng.choice(values)
        for col, (low, high) in zip(num_cols, ranges, strict=True):
            cell[col] = style.missing if rng.random() < style.gaps else str(rng.randint(low, high))
        rows.append([cell[c] for c in header])
        if len(rows) == 20:
            per_row = sum(len(render_row(r, style)) + 1 for r in rows) / 20 * (1 + style.noise)
    return Table(header, rows, cat_cols, num_cols, id_col)


def render_row(cells: Sequence[str], style: Style) -> str:
    d = style.delimiter
    out = []
    for c in cells:
        if style.quote_all or d in c or '"' in c:
            out.append('"' + c.replace('"', '""') + '"')
        else:
            out.append(c)
    return d.join(out)


def render(rng: random.Random, table: Table, style: Style) -> str:
    head = render_row(table.header, style)
    lines = [f"# export of {rng.randrange(2, 99)} shards, generated {rng.randrange(2020, 2025)}", head]
    for i, row in enumerate(table.rows):
        lines.append(render_row(row, style))
        if style.noise and rng.random() < style.noise:
            pick = rng.random()
            lines.append(head if pick < 0.5 else "" if pick < 0.75 else f"# shard {i // 97} ends")
    return "\n".join(lines) + "\n"


def read_table(document: str) -> tuple[list[str], list[list[str]]]:
    """(header, data rows) of a rendered table: comments, blank lines and repeated headers skipped."""
    import csv

    lines = [line for line in document.split("\n") if line.strip() and not line.startswith("#")]
    if not lines:
        raise InvalidTaskError("no table rows")
    delimiter = max(DELIMITERS, key=lines[0].count)
    parsed = list(csv.reader(lines, delimiter=delimiter))
    header = parsed[0]
    return header, [row for row in parsed[1:] if row != header]


def column(header: list[str], rows: list[list[str]], name: str) -> list[str]:
    if name not in header:
        raise InvalidTaskError(f"no column {name!r} in {header}")
    i = header.index(name)
    return [row[i] for row in rows]


def present_values(table: Table, cat: str, num: str) -> list[str]:
    """The values of `cat` that some row holds with a number in `num` (sorted, so seeded choice is stable)."""
    pairs = zip(column(table.header, table.rows, cat), column(table.header, table.rows, num), strict=True)
    return sorted({c for c, n in pairs if number(n) is not None})


def number(cell: str) -> int | None:
    return None if cell in MISSING else int(cell)


AGG_OPS = ("sum", "min", "max", "mean", "count_above", "count_below", "range", "sum_either", "sum_both")
_T = {
    "num": r"[^']+",
    "cat": r"[^']+",
    "value": r"[^']+",
    "other": r"[^']+",
    "cat2": r"[^']+",
    "value2": r"[^']+",
    "t": r"-?\d+",
}
_SKIP = " Rows where '{num}' is empty or NA do not count."
AGG_KINDS = {
    "sum": Phrasings(
        (
            "What is the sum of '{num}' over the rows where '{cat}' is '{value}'?"
            + _SKIP
            + " Answer with a number.",
            "Add up the '{num}' column for every row whose '{cat}' equals '{value}'."
            + _SKIP
            + " Give the total.",
            "Total '{num}' for '{cat}' = '{value}': what is it?" + _SKIP + " Reply with one number.",
            "Among rows with '{cat}' exactly '{value}', what does '{num}' add up to?" + _SKIP,
            "Compute the total of '{num}' restricted to '{cat}' == '{value}'." + _SKIP + " Just the number.",
        ),
        _T,
    ),
    "min": Phrasings(
        (
            "What is the smallest '{num}' among the rows where '{cat}' is '{value}'?"
            + _SKIP
            + " Answer with a number.",
            "Find the minimum of the '{num}' column over rows whose '{cat}' equals '{value}'." + _SKIP,
            "Lowest '{num}' for '{cat}' = '{value}': what is it?" + _SKIP + " Reply with one number.",
            "Among rows with '{cat}' exactly '{value}', what is the least '{num}' value?" + _SKIP,
            "Compute min('{num}') restricted to '{cat}' == '{value}'." + _SKIP + " Just the number.",
        ),
        _T,
    ),
    "max": Phrasings(
        (
            "What is the largest '{num}' among the rows where '{cat}' is '{value}'?"
            + _SKIP
            + " Answer with a number.",
            "Find the maximum of the '{num}' column over rows whose '{cat}' equals '{value}'." + _SKIP,
            "Highest '{num}' for '{cat}' = '{value}': what is it?" + _SKIP + " Reply with one number.",
            "Among rows with '{cat}' exactly '{value}', what is the greatest '{num}' value?" + _SKIP,
            "Compute max('{num}') restricted to '{cat}' == '{value}'." + _SKIP + " Just the number.",
        ),
        _T,
    ),
    "mean": Phrasings(
        (
            "What is the average '{num}' over the rows where '{cat}' is '{value}'?"
            + _SKIP
            + " Round to 2 decimals.",
            "Find the mean of the '{num}' column over rows whose '{cat}' equals '{value}', to 2 decimal places."
            + _SKIP,
            "Mean '{num}' for '{cat}' = '{value}', rounded to two decimals?" + _SKIP,
            "Among rows with '{cat}' exactly '{value}', what is the arithmetic mean of '{num}'?"
            + _SKIP
            + " Give 2 decimals.",
            "Compute avg('{num}') restricted to '{cat}' == '{value}', rounded to 2 decimals." + _SKIP,
        ),
        _T,
    ),
    "count_above": Phrasings(
        (
            "How many rows with '{cat}' equal to '{value}' have '{num}' greater than {t}? Answer with a number.",
            "Count the rows whose '{cat}' is '{value}' and whose '{num}' exceeds {t}.",
            "Rows where '{cat}' = '{value}' and '{num}' > {t}: how many are there? Reply with one number.",
            "For '{cat}' exactly '{value}', in how many rows is '{num}' strictly above {t}?",
            "Number of rows with '{cat}' == '{value}' and '{num}' above {t}? Just the number.",
        ),
        _T,
    ),
    "count_below": Phrasings(
        (
            "How many rows with '{cat}' equal to '{value}' have '{num}' less than {t}? Answer with a number.",
            "Count the rows whose '{cat}' is '{value}' and whose '{num}' is under {t}.",
            "Rows where '{cat}' = '{value}' and '{num}' < {t}: how many are there? Reply with one number.",
            "For '{cat}' exactly '{value}', in how many rows is '{num}' strictly below {t}?",
            "Number of rows with '{cat}' == '{value}' and '{num}' lower than {t}? Just the number.",
        ),
        _T,
    ),
    "range": Phrasings(
        (
            "What is the range of '{num}' (largest minus smallest) over the rows where '{cat}' is '{value}'?"
            + _SKIP,
            "Among rows whose '{cat}' equals '{value}', how far apart are the highest and the lowest '{num}'?"
            + _SKIP
            + " One number.",
            "Compute max('{num}') - min('{num}') restricted to '{cat}' == '{value}'." + _SKIP,
            "For '{cat}' = '{value}', take the greatest '{num}' and subtract the least one. Result?" + _SKIP,
            "Spread of '{num}' for '{cat}' exactly '{value}': its maximum minus its minimum?" + _SKIP,
        ),
        _T,
    ),
    "sum_either": Phrasings(
        (
            "What is the sum of '{num}' over the rows where '{cat}' is '{value}' or '{other}'?"
            + _SKIP
            + " Answer with a number.",
            "Add up '{num}' for every row whose '{cat}' is either '{value}' or '{other}'." + _SKIP,
            "Total '{num}' for '{cat}' in ('{value}', '{other}'): what is it?"
            + _SKIP
            + " Reply with one number.",
            "Rows with '{cat}' = '{value}' together with rows with '{cat}' = '{other}': what does '{num}' add "
            "up to?" + _SKIP,
            "Compute the combined total of '{num}' over the '{cat}' values '{value}' and '{other}'." + _SKIP,
        ),
        _T,
    ),
    "sum_both": Phrasings(
        (
            "What is the sum of '{num}' over the rows where '{cat}' is '{value}' and '{cat2}' is '{value2}'?"
            + _SKIP
            + " Answer with a number.",
            "Add up '{num}' for every row whose '{cat}' equals '{value}' and whose '{cat2}' equals '{value2}'."
            + _SKIP,
            "Total '{num}' for '{cat}' = '{value}' and '{cat2}' = '{value2}': what is it?"
            + _SKIP
            + " Reply with one number.",
            "Among rows with '{cat}' exactly '{value}', keep those with '{cat2}' exactly '{value2}': what does "
            "'{num}' add up to?" + _SKIP,
            "Compute the total of '{num}' restricted to '{cat}' == '{value}' and '{cat2}' == '{value2}'."
            + _SKIP,
        ),
        _T,
    ),
}
# min / max sit near a column's bounds: keep them rarer; the kinds that filter on two conditions or combine
# two aggregates get as much weight as the one-filter total, so no one cell shape dominates the family
AGG_WEIGHTS = (0.18, 0.06, 0.06, 0.12, 0.1, 0.1, 0.12, 0.13, 0.13)


def aggregate(op: str, cells: Sequence[str], keep: Sequence[bool], t: int = 0) -> int | float:
    values = [v for c, k in zip(cells, keep, strict=True) if k and (v := number(c)) is not None]
    if not values:
        raise InvalidTaskError("no row matches the condition")
    if op in ("sum", "sum_either", "sum_both"):
        return sum(values)
    if op == "min":
        return min(values)
    if op == "max":
        return max(values)
    if op == "range":
        return max(values) - min(values)
    if op == "mean":
        return round(statistics.fmean(values), 2)
    if op == "count_below":
        return sum(1 for v in values if v < t)
    return sum(1 for v in values if v > t)


def keep_rows(header: list[str], rows: list[list[str]], op: str, s: dict[str, str]) -> list[bool]:
    """Which rows a question's filter keeps: its value of `cat` (or either of two), and of `cat2` too."""
    values = {s["value"], s["other"]} if op == "sum_either" else {s["value"]}
    keep = [c in values for c in column(header, rows, s["cat"])]
    if op == "sum_both":
        keep = [k and c == s["value2"] for k, c in zip(keep, column(header, rows, s["cat2"]), strict=True)]
    return keep


def setup(rng: random.Random, family: str, length_tokens: int, difficulty: str, corpora: Corpora):
    """A theme, style and table of about `length_tokens`, plus its rendering."""
    theme = THEMES[rng.choice(tuple(THEMES))]
    style = draw_style(rng, difficulty)
    texts = formats.lines_from(corpora, "shakespeare")
    table = make_table(rng, theme, style, formats.chars_for(length_tokens, family), texts)
    return theme, style, table, render(rng, table, style)


def generate_agg(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"table_aggregate/{seed}")
    op = rng.choices(AGG_OPS, AGG_WEIGHTS)[0]
    _, style, table, document = setup(rng, "table_aggregate", length_tokens, difficulty, corpora)
    ci = rng.randrange(2)
    cat, num = table.cat_cols[ci], rng.choice(table.num_cols)
    value = rng.choice(present_values(table, cat, num))
    slots = {
        "num": num,
        "cat": cat,
        "value": value,
        "other": "",
        "cat2": table.cat_cols[1 - ci],
        "value2": "",
    }
    if op == "sum_either":
        slots["other"] = rng.choice([v for v in present_values(table, cat, num) if v != value])
    if op == "sum_both":  # a value of the other column that some kept row holds with a number
        pairs = zip(*(column(table.header, table.rows, c) for c in (cat, slots["cat2"], num)), strict=True)
        slots["value2"] = rng.choice(
            sorted({c2 for c, c2, n in pairs if c == value and number(n) is not None})
        )
    keep = keep_rows(table.header, table.rows, op, slots)
    cells = column(table.header, table.rows, num)
    present = sorted(number(c) for c, k in zip(cells, keep, strict=True) if k and number(c) is not None)
    t = present[rng.randrange(len(present))] if present else 0  # any count from 0 to the group's size
    answer = aggregate(op, cells, keep, t)
    question = AGG_KINDS[op].write(rng, t=t, **slots)
    meta = {"kind": op, "rows": len(table.rows), "delimiter": style.delimiter, "case": style.case}
    return make_task(
        "table_aggregate", seed, length_tokens, difficulty, question, answer, "numeric", document, meta
    )


def solve_agg(question: str, document: str) -> int | float:
    op, s = formats.parse_kind(AGG_KINDS, question)
    header, rows = read_table(document)
    slots = {"other": "", "cat2": "", "value2": "", **s}
    keep = keep_rows(header, rows, op, slots)
    return aggregate(op, column(header, rows, s["num"]), keep, int(s.get("t", 0)))


def wrong_agg(task: Task, document: str) -> list[int | float | str]:
    gold = task.answer
    assert isinstance(gold, int | float)
    candidates = [gold + 1, gold - 1, gold * 2 + 3, round(gold * 1.1 + 2, 2), "none"]
    return [w for w in candidates if w != gold]


FAMILY = Family(
    "table_aggregate",
    "delimited tables: sum / min / max / mean / range / count over rows matching one or two conditions",
    generate_agg,
    solve_agg,
    wrong_agg,
    True,
)
