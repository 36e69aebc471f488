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
``exact``). manual_count asks how many options of a command take a given type, how many commands accept
a given option (``numeric``), or which of two commands has more options (``exact``; their counts differ).

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
COUNT_QUESTIONS = {
    "type_count": Phrasings(
        (
            "How many options of `{cmd}` take a value of type {type}?" + _NUM,
            "Count the {type} options documented for `{cmd}`." + _NUM,
            "In the options table of `{cmd}`, how many options are of type {type}?" + _NUM,
            "How many of the options that `{cmd}` accepts have the type {type}?" + _NUM,
            "For the command `{cmd}`, how many documented options are {type} options?" + _NUM,
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


def _default(rng: random.Random, kind: str) -> str:
    return {
        "integer": lambda: str(rng.choice((1, 2, 4, 8, 16, 32, 64, 100, 256, 512, 1000))),
        "boolean": lambda: rng.choice(("true", "false")),
        "string": lambda: rng.choice(("auto", "none", "plain", "json", "fast", "strict")),
        "path": lambda: f"/var/lib/{rng.choice(NOUNS)}",
        "duration": lambda: f"{rng.choice((5, 10, 30, 60, 90, 120))}{rng.choice('smh')}",
    }[kind]()


def build(rng: random.Random, corpora: Corpora, length_tokens: int, difficulty: str) -> tuple[str, dict]:
    pool_size, per_cmd = LEVELS[difficulty]
    tool = f"{rng.choice(NOUNS)}ctl"
    pool: list[str] = []
    while len(pool) < pool_size:
        words = rng.sample(OPTION_WORDS, rng.randint(1, 2))
        name = "--" + "-".join(words)
        if name not in pool:
            pool.append(name)
    types = {name: rng.choice(TYPES) for name in pool}  # an option keeps its type everywhere
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
        cmd = f"{tool} {names[len(commands)]}"
        opts = [
            (o, types[o], _default(rng, types[o]))
            for o in rng.sample(pool, min(pool_size, rng.randint(*per_cmd)))
        ]
        commands[cmd] = opts
        lines += ["", budget.struct(heading.format(cmd=cmd)), ""]
        lines += [budget.prose(snippets.next(80, 500)) for _ in range(rng.randint(1, 2))]
        lines += ["", budget.struct(rng.choice(("Options:", "#### Options", "**Options**"))), ""]
        if as_table:
            lines += [budget.struct("| " + " | ".join(columns) + " |"), budget.struct("|" + "---|" * 4)]
        for name, kind, default in opts:
            text = snippets.next(30, 120).replace("|", "/").replace("`", "'")
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
    if kind == "type_count":
        return sum(1 for _, t, _ in manual[s["cmd"]] if t == s["type"])
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
    document, info = build(rng, corpora, length_tokens, difficulty)
    manual = parse_manual(document)
    cmds = sorted(manual)
    kind = rng.choice(tuple(questions))
    cmd = rng.choice(cmds)
    slots = {"cmd": cmd, "cmd2": "", "opt": "", "type": ""}
    if kind == "default":
        slots["opt"] = rng.choice(manual[cmd])[0]
    elif kind == "type_count":
        slots["type"] = rng.choice([t for _, t, _ in manual[cmd]])
    elif kind == "accepts":
        slots["opt"] = rng.choice(info["pool"])
    else:
        others = [c for c in cmds if len(manual[c]) != len(manual[cmd])]
        if others:
            slots["cmd2"] = rng.choice(others)
        else:  # a short manual whose commands all have as many options: count a type instead
            kind, slots["type"] = "type_count", rng.choice([t for _, t, _ in manual[cmd]])
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
