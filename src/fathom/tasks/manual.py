"""Markdown manuals of a made-up command-line tool: an option's default in one command's section
(`manual_default`, a scoped lookup) and counts / comparisons over the option tables (`manual_count`).

A document is a manual: a title, then one section per command (a heading in one of `HEADINGS`, prose
paragraphs from one corpus, an "Options" sub-heading and the command's options), with the options as a
pipe table whose columns come in a random order, or as a bullet list (`OPTION_LIST`)::

    ## `lanternctl sync-falcon`
    | Default | Option | Type | Description |
    |---|---|---|---|
    | `30s` | `--retry-wait` | duration | ...

Option names come from one pool per document, so the same option appears in many commands with
different defaults: a search for the option alone finds the wrong section.

manual_default asks for the default of one option of one command (gold: the default as written,
``exact``; values come from wide ranges, booleans are "on" / "off" and asked one time in ten at most).
manual_count asks how many option rows of the whole manual have a given type, how many commands accept a
given option (``numeric``; types and options have per-manual weights, and its manuals have short prose,
so counts spread widely), or which of two commands has more options (``exact``; their counts differ).

For an expert: `parse_manual(document)` gives command -> [(option, type, default)] in order.
Difficulty: easy 6-option pool, medium 14, hard 24 (more options per command at hard).

This module does not write glossaries (see `fathom.tasks.glossary`).
"""

from __future__ import annotations

import random
import re

from fathom.tasks import prose
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, make_task
from fathom.tasks.haystack import Corpora
from fathom.tasks.prose import Budget, Phrasings, Snippets
from fathom.tasks.schema import Task
from fathom.tasks.words import NOUNS

VERBS = ("sync", "build", "prune", "export", "import", "watch", "serve", "index", "verify", "mirror")
VERBS += ("deploy", "rotate", "scan", "pack", "seal", "query", "merge", "split", "tag", "trace")
OPTION_WORDS = ("max", "retry", "cache", "depth", "batch", "color", "shard", "timeout", "wait", "dry")
OPTION_WORDS += ("log", "level", "output", "format", "mirror", "chunk", "limit", "quiet", "keep", "base")
TYPES = ("integer", "boolean", "string", "path", "duration")
STRING_MODES = ("auto", "plain", "json", "fast", "strict", "lazy", "eager", "compact", "verbose", "safe")
HEADINGS = ("## `{cmd}`", "### {cmd}", "## Command: {cmd}")
HEADING_RE = re.compile(
    r"^(?:## `([a-z]+ctl [a-z-]+)`|### ([a-z]+ctl [a-z-]+)|## Command: ([a-z]+ctl [a-z-]+))$", re.M
)
OPTION_LIST = "- `{name}` ({type}, default `{default}`): {text}"
LIST_RE = re.compile(r"^- `(--[a-z-]+)` \(([a-z]+), default `([^`]*)`\): ", re.M)
COLUMNS = ("Option", "Type", "Default", "Description")
TABLE_RATE = 3.2  # chars per token of option rows (names and words, few digits)
# difficulty -> (option pool, options per command)
LEVELS = {"easy": (6, (2, 4)), "medium": (14, (3, 6)), "hard": (24, (4, 9))}
_CMD = r"[a-z]+ctl [a-z-]+"
_OPT = r"--[a-z-]+"
_SLOTS = {"cmd": _CMD, "cmd2": _CMD, "opt": _OPT, "type": "(?:" + "|".join(TYPES) + ")"}
DEFAULT_QUESTIONS = {
    "default": Phrasings(
        (
            "According to the manual, what is the default value of `{opt}` for `{cmd}`? Answer with the value only.",
            "In the options of `{cmd}`, which default does `{opt}` have?",
            "What does `{opt}` default to when running `{cmd}`? Give the default exactly as documented.",
            "Look up the `{cmd}` command: what is its documented default for the option `{opt}`?",
            "If `{opt}` is not given to `{cmd}`, what value does it take (the documented default)?",
        ),
        _SLOTS,
    )
}
_NUM = " Answer with a number."
_ROWS = " (An option documented for several commands counts once per command.)"
COUNT_QUESTIONS = {
    "type_total": Phrasings(
        (
            "Across all commands, how many documented options take a value of type {type}?" + _ROWS + _NUM,
            "Count the {type} options documented in the whole manual." + _ROWS + _NUM,
            "In all the options tables of the manual, how many options are of type {type}?" + _ROWS + _NUM,
            "How many option entries of the manual, over every command, have the type {type}?" + _ROWS + _NUM,
            "Summed over the commands, how many documented options are {type} options?" + _ROWS + _NUM,
        ),
        _SLOTS,
    ),
    "accepts": Phrasings(
        (
            "How many commands in the manual accept the option `{opt}`?" + _NUM,
            "Count the commands whose options include `{opt}`." + _NUM,
            "In how many command sections is `{opt}` listed as an option?" + _NUM,
            "How many different commands document an `{opt}` option?" + _NUM,
            "Across the whole manual, how many commands take `{opt}`?" + _NUM,
        ),
        _SLOTS,
    ),
    "compare": Phrasings(
        (
            "Which command has more documented options, `{cmd}` or `{cmd2}`? Answer with the command.",
            "Does `{cmd}` or `{cmd2}` accept more options? Give the command name.",
            "Of `{cmd}` and `{cmd2}`, which one lists more options in the manual?",
            "Compare the option lists of `{cmd}` and `{cmd2}`: which command has the longer one?",
            "Between `{cmd}` and `{cmd2}`, which takes the larger number of options?",
        ),
        _SLOTS,
    ),
}


# Question kind weights; the compare kind is exact and one of two commands, the counts spread widely.
KIND_WEIGHTS = {"default": 1.0, "type_total": 0.55, "accepts": 0.1, "compare": 0.35}


def _default(rng: random.Random, kind: str) -> str:
    # Wide value ranges, and booleans spelled "on" / "off" (config files say true / false), so a blind
    # guess of the usual default, or another family's gold, rarely fits.
    return {
        "integer": lambda: str(rng.randint(2, 4096)),
        "boolean": lambda: rng.choice(("on", "off")),
        "string": lambda: f"{rng.choice(NOUNS)}-{rng.choice(STRING_MODES)}",
        "path": lambda: f"/var/lib/{rng.choice(NOUNS)}/{rng.choice(NOUNS)}",
        "duration": lambda: f"{rng.randint(2, 600)}{rng.choice('smh')}",
    }[kind]()


def build(
    rng: random.Random, corpora: Corpora, length_tokens: int, difficulty: str, dense: bool = False
) -> tuple[str, dict]:
    """A manual of about `length_tokens`; `dense` writes short prose, so there are more commands."""
    pool_size, per_cmd = LEVELS[difficulty]
    prose_chars, text_chars = ((20, 100), (15, 40)) if dense else ((80, 500), (30, 120))
    tool = f"{rng.choice(NOUNS)}ctl"
    pool: list[str] = []
    while len(pool) < pool_size:
        words = rng.sample(OPTION_WORDS, rng.randint(1, 2))
        name = "--" + "-".join(words)
        if name not in pool:
            pool.append(name)
    # An option keeps its type everywhere; types and options are drawn with per-manual weights, so how
    # many rows have a type, or how many commands take an option, varies widely between manuals.
    type_weights = [rng.uniform(0.05, 1.0) ** 2 for _ in TYPES]  # squared: some types dominate
    types = {name: rng.choices(TYPES, type_weights)[0] for name in pool}
    popularity = {name: rng.uniform(0.05, 1.0) for name in pool}
    source = prose.prose_source(rng, corpora, int(length_tokens * 3.3))
    budget = Budget(source)
    snippets = Snippets(corpora, rng, source, int(length_tokens * 3.3) + 4000)
    heading, as_table = rng.choice(HEADINGS), rng.random() < 0.6
    columns = rng.sample(COLUMNS, len(COLUMNS))
    names = [f"{v}-{n}" for v in VERBS for n in NOUNS]
    rng.shuffle(names)
    lines = [budget.struct(f"# {tool} manual"), "", budget.prose(snippets.next(100, 300))]
    commands: dict[str, list[tuple[str, str, str]]] = {}
    while budget.tokens < length_tokens - 40 or len(commands) < 2:
        # verb-noun names run out in very long dense manuals: then add a second noun (still unique).
        i, n = len(commands), len(names)
        cmd = f"{tool} {names[i % n]}" + (f"-{NOUNS[i // n - 1]}" if i >= n else "")
        # Weighted sampling without replacement (Efraimidis-Spirakis keys), in a random order.
        chosen = sorted(pool, key=lambda o: rng.random() ** (1 / popularity[o]), reverse=True)
        chosen = chosen[: min(pool_size, rng.randint(*per_cmd))]
        rng.shuffle(chosen)
        opts = [(o, types[o], _default(rng, types[o])) for o in chosen]
        commands[cmd] = opts
        lines += ["", budget.struct(heading.format(cmd=cmd)), ""]
        lines += [budget.prose(snippets.next(*prose_chars)) for _ in range(rng.randint(1, 2))]
        lines += ["", budget.struct(rng.choice(("Options:", "#### Options", "**Options**"))), ""]
        if as_table:
            lines += [budget.struct("| " + " | ".join(columns) + " |"), budget.struct("|" + "---|" * 4)]
        for name, kind, default in opts:
            text = snippets.next(*text_chars).replace("|", "/").replace("`", "'")
            if as_table:
                cell = {"Option": f"`{name}`", "Type": kind, "Default": f"`{default}`", "Description": text}
                budget.struct(
                    "| " + " | ".join(cell[c] for c in columns if c != "Description") + " | |", TABLE_RATE
                )
                lines.append("| " + " | ".join(cell[c] for c in columns) + " |" + budget.prose(""))
                budget.prose(text)
            else:
                lines.append(
                    budget.struct(
                        OPTION_LIST.format(name=name, type=kind, default=default, text=""), TABLE_RATE
                    )
                    + budget.prose(text)
                )
    return "\n".join(lines), {"commands": commands, "pool": pool}


def parse_manual(document: str) -> dict[str, list[tuple[str, str, str]]]:
    """command -> [(option, type, default)] per section, from the table or the bullet list."""
    heads = list(HEADING_RE.finditer(document))
    out: dict[str, list[tuple[str, str, str]]] = {}
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(document)
        section = document[head.end() : end]
        cmd = next(g for g in head.groups() if g)
        opts = [tuple(m) for m in LIST_RE.findall(section)]
        header = re.search(
            r"^\| ((?:Option|Type|Default|Description)(?: \| [A-Za-z]+){3}) \|$", section, re.M
        )
        if header:
            cols = header.group(1).split(" | ")
            for row in re.findall(r"^\| (.*`--[a-z-]+`.*) \|$", section, re.M):
                cell = dict(zip(cols, row.split(" | "), strict=True))
                opts.append((cell["Option"].strip("`"), cell["Type"], cell["Default"].strip("`")))
        out[cmd] = opts  # type: ignore[assignment]
    if len(out) < 2:
        raise InvalidTaskError("the manual has fewer than two commands")
    return out


def _answer(kind: str, s: dict[str, str], manual: dict[str, list[tuple[str, str, str]]]) -> str | int:
    if kind == "default":
        hits = [d for o, _, d in manual[s["cmd"]] if o == s["opt"]]
        if len(hits) != 1:
            raise InvalidTaskError(f"{s['cmd']} documents {s['opt']} {len(hits)} times")
        return hits[0]
    if kind == "type_total":
        return sum(1 for opts in manual.values() for _, t, _ in opts if t == s["type"])
    if kind == "accepts":
        return sum(1 for opts in manual.values() if any(o == s["opt"] for o, _, _ in opts))
    a, b = len(manual[s["cmd"]]), len(manual[s["cmd2"]])
    if a == b:
        raise InvalidTaskError("the two commands have as many options")
    return s["cmd"] if a > b else s["cmd2"]


def _generate(
    name: str, questions: dict, metric_of, seed: int, length_tokens: int, difficulty: str, corpora: Corpora
) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{name}/{seed}")
    # Counts need many commands to spread (short prose); a default lookup keeps long sections.
    document, info = build(rng, corpora, length_tokens, difficulty, dense=name == "manual_count")
    manual = parse_manual(document)
    cmds = sorted(manual)
    kind = rng.choices(tuple(questions), [KIND_WEIGHTS[k] for k in questions])[0]
    cmd = rng.choice(cmds)
    slots = {"cmd": cmd, "cmd2": "", "opt": "", "type": ""}
    if kind == "default":
        # Booleans have two values, a coin flip for a blind policy: ask about them rarely.
        valued = [o for o, t, _ in manual[cmd] if t != "boolean"]
        slots["opt"] = rng.choice(valued if valued and rng.random() < 0.9 else [o for o, _, _ in manual[cmd]])
    elif kind == "type_total":
        slots["type"] = rng.choice(sorted({t for opts in manual.values() for _, t, _ in opts}))
    elif kind == "accepts":
        slots["opt"] = rng.choice(info["pool"])
    else:
        others = [c for c in cmds if len(manual[c]) != len(manual[cmd])]
        if others:
            slots["cmd2"] = rng.choice(others)
        else:  # a short manual whose commands all have as many options: count a type instead
            kind, slots["type"] = "type_total", rng.choice([t for _, t, _ in manual[cmd]])
    question = questions[kind].write(rng, **slots)
    gold = _answer(kind, slots, manual)
    meta = {"kind": kind, "commands": len(manual)}
    return make_task(name, seed, length_tokens, difficulty, question, gold, metric_of(kind), document, meta)


def generate_default(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    return _generate(
        "manual_default", DEFAULT_QUESTIONS, lambda _: "exact", seed, length_tokens, difficulty, corpora
    )


def generate_count(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    def metric(kind: str) -> str:
        return "exact" if kind == "compare" else "numeric"

    return _generate("manual_count", COUNT_QUESTIONS, metric, seed, length_tokens, difficulty, corpora)


def solve_default(question: str, document: str) -> str | int:
    kind, slots = prose.parse_kind(DEFAULT_QUESTIONS, question)
    return _answer(kind, slots, parse_manual(document))


def solve_count(question: str, document: str) -> str | int:
    kind, slots = prose.parse_kind(COUNT_QUESTIONS, question)
    return _answer(kind, slots, parse_manual(document))


def wrong_default(task: Task, document: str) -> list[str]:
    _, slots = prose.parse_kind(DEFAULT_QUESTIONS, task.question)
    manual = parse_manual(document)
    elsewhere = {d for opts in manual.values() for o, _, d in opts if o == slots["opt"]}
    here = {d for _, _, d in manual[slots["cmd"]]}
    return [*sorted((elsewhere | here) - {task.answer}), ""]


def wrong_count(task: Task, document: str) -> list[str | int]:
    kind, slots = prose.parse_kind(COUNT_QUESTIONS, task.question)
    if kind == "compare":
        return [slots["cmd2"] if task.answer == slots["cmd"] else slots["cmd"], "both", ""]
    gold = int(task.answer)  # type: ignore[arg-type]
    return [gold + 1, gold - 1, gold + 3, "none"]


DEFAULT = Family(
    "manual_default",
    "an option's default in one command's section of a manual",
    generate_default,
    solve_default,
    wrong_default,
    True,
)
COUNT = Family(
    "manual_count",
    "count or compare options over a manual's option tables",
    generate_count,
    solve_count,
    wrong_count,
    True,
)
FAMILIES = (DEFAULT, COUNT)
