"""Python source: `code_calls` (list the callers of a function) and `code_value` (resolve a constant).

A document is a contiguous window of the standard library corpus (``# Lib/<path>`` headers between
files) with planted top-level blocks inserted at blank lines. Names are built from the word lists
(``refresh_lantern``, ``BRISK_OTTER``) and never occur in the window, so only planted code matters.

``code_calls`` (set_f1): every function whose body calls ``T(...)``. Near misses are planted too:
functions that call a look-alike (``T_async(``, ``pre_T(``), mention ``T()`` only in a comment or a string,
or define ``T`` itself. Gold: sorted function names; 3 to 10 callers.

``code_value`` kinds: ``final`` (the integer a module constant holds after every top-level assignment in
document order: ``A = 7`` ... ``B = A * 3`` ... ``B = B + 2``; commented-out assignments and look-alike
names ``B_MAX`` are distractors) and ``default`` (the default of a parameter of a function, when look-alike
functions ``F_v2`` / ``_F`` give the same parameter other defaults). Exact answers. Five phrasings each.

For an expert: `callers(document, name)` and `final_value(document, name)` / `default_of` are the
reference readers; `CALL_KINDS` / `VALUE_KINDS` parse questions. This module does not parse Python with
`ast` (a window is not a whole module) and knows nothing of other shapes.
"""

from __future__ import annotations

import random
import re

from fathom.tasks import formats
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora, insert_paragraphs, take
from fathom.tasks.schema import Task
from fathom.tasks.words import ADJECTIVES, NOUNS

VERBS = ("refresh", "resolve", "encode", "flush", "render", "merge", "sync", "parse", "score", "pack")
_STRINGS = re.compile(r'"[^"\n]*"|\'[^\'\n]*\'')


def fresh(rng: random.Random, make, window: str, taken: set[str]) -> str:
    while True:
        name = make()
        if name not in taken and name not in window:
            taken.add(name)
            return name


def function(name: str, params: str, body: list[str], doc: str) -> str:
    return "\n".join([f"def {name}({params}):", f'    """{doc}"""', *("    " + line for line in body)])


def window_and_texts(rng: random.Random, corpora: Corpora, family: str, length_tokens: int, planted: int):
    text = corpora.text("stdlib")
    window = take(text, rng, max(2000, formats.chars_for(length_tokens, family) - planted))
    return window, formats.lines_from(corpora, "fortunes")


def place(rng: random.Random, window: str, blocks: list[str], ordered: bool = False) -> str:
    depths = sorted(rng.random() for _ in blocks) if ordered else [rng.random() for _ in blocks]
    return insert_paragraphs(window, blocks, depths) + "\n"


def _code_only(line: str) -> str:
    return _STRINGS.sub('""', line).split("#", 1)[0]


def callers(document: str, target: str) -> list[str]:
    """Top-level functions whose body calls `target` (comments and string literals ignored)."""
    call = re.compile(rf"(?<![\w.]){re.escape(target)}\(")
    out, current = set(), None
    for line in document.split("\n"):
        if line[:1] not in ("", " ", "\t"):
            m = re.match(r"def (\w+)\(", line)
            current = m.group(1) if m else None
        elif current and current != target and call.search(_code_only(line)):
            out.add(current)
    return sorted(out)


_F = {"name": r"\w+", "param": r"\w+"}
CALL_KINDS = {
    "callers": Phrasings(
        (
            "List every function in this source that calls {name}(). Give the function names.",
            "Which functions call {name} in their body? Name all of them (comments and strings do not count).",
            "Find all callers of {name}(...) in the code above and list their names.",
            "Give the names of the top-level functions that invoke {name}, one per line.",
            "Who calls {name}()? List each calling function's name.",
        ),
        _F,
    )
}


def generate_calls(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"code_calls/{seed}")
    window, texts = window_and_texts(rng, corpora, "code_calls", length_tokens, 2500)
    taken: set[str] = set()
    fname = lambda: f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"  # noqa: E731
    target = fresh(rng, fname, window, taken)
    n_callers, n_near = rng.randint(3, 10), {"easy": 2, "medium": 4, "hard": 7}[difficulty]
    names = [fresh(rng, fname, window, taken) for _ in range(n_callers + n_near)]
    blocks = [function(target, "value, *, strict=False", ["return value"], rng.choice(texts))]
    for name in names[:n_callers]:
        line = rng.choice(
            (
                f"result = {target}(item)",
                f"return {target}(item, strict=True)",
                f"self.cache = {target}(item)",
            )
        )
        blocks.append(function(name, "item", [f"# {rng.choice(texts)}", line], rng.choice(texts)))
    for name in names[n_callers:]:
        line = rng.choice(
            (
                f"return {target}_async(item)",
                f"return pre_{target}(item)",
                f"# {target}() used to be called here",
                f'log.debug("skipping {target}() for %r", item)',
            )
        )
        blocks.append(function(name, "item", [line, "return None"], rng.choice(texts)))
    document = place(rng, window, blocks)
    question = CALL_KINDS["callers"].write(rng, name=target)
    answer = callers(document, target)
    meta = {"callers": n_callers, "near_misses": n_near}
    return make_task(
        "code_calls", seed, length_tokens, difficulty, question, answer, "set_f1", document, meta
    )


def solve_calls(question: str, document: str) -> list[str]:
    return callers(document, CALL_KINDS["callers"].parse(question)["name"])


def wrong_calls(task: Task, document: str) -> list[list[str]]:
    gold = list(task.answer)  # type: ignore[arg-type]
    if len(gold) < 3:
        raise InvalidTaskError(f"{task.id}: only {len(gold)} callers")
    target = CALL_KINDS["callers"].parse(task.question)["name"]
    return [gold[:-1], gold[1:], [*gold, target], [gold[0]], []]


_ASSIGN = re.compile(r"^([A-Z][A-Z0-9_]*) = (\d+|[A-Z][A-Z0-9_]*(?: [+*-] \d+)?)$", re.MULTILINE)


def final_value(document: str, name: str) -> int:
    """The value of `name` after every top-level `NAME = expr` line in order (expr: N, NAME, NAME op N)."""
    env: dict[str, int] = {}
    for left, expr in _ASSIGN.findall(document):
        parts = expr.split()
        base = int(parts[0]) if parts[0].isdigit() else env.get(parts[0])
        if base is None:
            env.pop(left, None)
            continue
        if len(parts) == 3:
            n = int(parts[2])
            base = base + n if parts[1] == "+" else base - n if parts[1] == "-" else base * n
        env[left] = base
    if name not in env:
        raise InvalidTaskError(f"{name} is never assigned a value")
    return env[name]


def default_of(document: str, func: str, param: str) -> str:
    sig = find_one(re.findall(rf"^def {re.escape(func)}\((.*)\):$", document, re.MULTILINE), f"def {func}")
    return find_one(re.findall(rf"(?<!\w){re.escape(param)}=([^,)]+)", sig), f"default of {param}")


_V = {"name": r"[A-Z][A-Z0-9_]*", "func": r"\w+", "param": r"\w+"}
VALUE_KINDS = {
    "final": Phrasings(
        (
            "What integer does the module constant {name} hold after all top-level assignments, in order?",
            "Follow every top-level assignment in document order: what is the final value of {name}?",
            "Evaluate {name} as the module would after running all its top-level assignments. Answer with "
            "the number.",
            "What number is {name} bound to at the end of the source (commented-out lines do not run)?",
            "Resolve {name}: after the last assignment to it, what integer is it?",
        ),
        _V,
    ),
    "default": Phrasings(
        (
            "What is the default value of the parameter {param} of the function {func}?",
            "In the signature of {func}, which default does {param} have?",
            "If {func} is called without {param}, what value does {param} take?",
            "Give the default of {param} in def {func}(...). Answer with the value as written.",
            "The function named exactly {func} declares {param} with a default. What is it?",
        ),
        _V,
    ),
}


def generate_value(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"code_value/{seed}")
    kind = rng.choice(tuple(VALUE_KINDS))
    window, texts = window_and_texts(rng, corpora, "code_value", length_tokens, 1500)
    taken: set[str] = set()
    const = lambda: f"{rng.choice(ADJECTIVES)}_{rng.choice(NOUNS)}".upper()  # noqa: E731
    blocks: list[str] = []
    slots: dict[str, str] = {}
    if kind == "final":
        a, b = fresh(rng, const, window, taken), fresh(rng, const, window, taken)
        blocks += [f"{a} = {rng.randint(2, 90)}", f"{b} = {a} {rng.choice('+*-')} {rng.randint(2, 9)}"]
        if difficulty != "easy":
            blocks.append(f"{b} = {b} {rng.choice('+-')} {rng.randint(1, 50)}")
        blocks += [
            f"# {b} = {rng.randint(100, 999)}  ({rng.choice(texts)})",
            f"{b}_MAX = {rng.randint(1, 999)}",
        ]
        if difficulty == "hard":
            blocks.append(f"_{b} = {b} * {rng.randint(2, 5)}")
        slots["name"] = b
        ordered = [*blocks[:3]] if difficulty != "easy" else blocks[:2]
        rest = blocks[len(ordered) :]
        document = place(rng, window, ordered, ordered=True)
        document = place(rng, document.rstrip("\n"), rest)
    else:
        func = fresh(rng, lambda: f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}", window, taken)
        param = rng.choice(("timeout", "retries", "mode", "limit", "encoding", "chunk_size"))
        values = formats.distinct(
            rng, lambda: rng.choice((str(rng.randint(1, 600)), repr(rng.choice(NOUNS)))), 3
        )
        for name, value in zip((func, f"{func}_v2", f"_{func}"), values, strict=True):
            body = [f"# {rng.choice(texts)}", f"return {param}"]
            blocks.append(
                function(name, f"source, {param}={value}, *, strict=False", body, rng.choice(texts))
            )
        slots.update(func=func, param=param)
        document = place(rng, window, blocks)
    question = VALUE_KINDS[kind].write(rng, **slots)
    answer: str | int = (
        final_value(document, slots["name"]) if kind == "final" else default_of(document, **slots)
    )
    meta = {"kind": kind}
    return make_task("code_value", seed, length_tokens, difficulty, question, answer, "exact", document, meta)


def solve_value(question: str, document: str) -> str | int:
    kind, s = formats.parse_kind(VALUE_KINDS, question)
    return (
        final_value(document, s["name"]) if kind == "final" else default_of(document, s["func"], s["param"])
    )


def wrong_value(task: Task, document: str) -> list[str | int]:
    kind, s = formats.parse_kind(VALUE_KINDS, task.question)
    if kind == "final":
        gold = int(task.answer)  # type: ignore[arg-type]
        return [gold + 1, gold - 1, gold * 2 + 1, ""]
    others = re.findall(
        rf"^def _?{re.escape(s['func'])}(?:_v2)?\(.*{s['param']}=([^,)]+)", document, re.MULTILINE
    )
    return [v for v in others if v != task.answer] + [""]


CALLS_FAMILY = Family(
    "code_calls",
    "Python source: list every caller of a function",
    generate_calls,
    solve_calls,
    wrong_calls,
    True,
)
VALUE_FAMILY = Family(
    "code_value",
    "Python source: a constant's final value through assignments; a parameter's default",
    generate_value,
    solve_value,
    wrong_value,
    True,
)
FAMILIES = (CALLS_FAMILY, VALUE_FAMILY)
