"""The teacher's source-code move: Python seen in the head is searched in code, never read by llm(): the
top-level functions that call a name, the value a module constant ends with, a parameter's default.

`code_shape(sight)` says whether the look move's printout is Python source (at least three lines that are
Python statements: ``def``, ``class``, ``return``, ``import``, ``if ...:``, ``x = f(...)``, ...).
`code_question(q)` reads what the question asks of it, or None:
``callers`` (which functions call ``name(``), ``final`` (the integer an UPPER_CASE constant holds after the
top-level assignments, in order), ``default`` (a parameter's default in a ``def`` line). `code_cell(rng, ask)`
writes one cell that computes the answer and FINALs it (and prints what it found, without FINAL, when it finds
nothing: the teacher then searches as it would without this move):

- callers: each top-level ``def`` opens a block that ends at the next line at the margin; a block calls the
  name when one of its lines, with string literals and the comment cut off, has ``name(`` (spaces allowed
  before the bracket) not preceded by a letter, digit, underscore or dot (``pre_name(``, ``obj.name(`` and
  ``name_async(`` are other functions);
- final: the top-level ``NAME = ...`` lines (never commented ones) of the constant and of the constants its
  right-hand sides name, run in document order;
- default: the ``def`` line of a question word whose parameter list gives another question word a default.

It knows no generator: these are what Python's syntax says. This module only writes text.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from fathom.policies.looking import Question, Sight
from fathom.policies.moves import turn

# Python statements at any depth: a look that lands inside a class or a docstring shows only indented ones
_STATEMENT = re.compile(
    r"^\s*(def \w+\(|class \w+|return\b|import \w|from \S+ import |(el)?if .*:$|for .* in .*:$|while .*:$|else:$"
    r"|with .* as \w+:$|@\w+|[\w.]+ = [\w.]+\(|[\w.]+\.append\()",
    re.M,
)


@dataclass(frozen=True)
class CodeAsk:
    op: str  # callers, final, default
    names: tuple[
        str, ...
    ]  # callers: (the called name,); final: (the constant,); default: the question's words


def code_shape(sight: Sight) -> bool:
    return len(_STATEMENT.findall("\n".join([sight.head, *sight.samples]))) >= 3


def code_question(q: Question) -> CodeAsk | None:
    lower = q.text.lower()
    words = tuple(dict.fromkeys(re.findall(r"[A-Za-z_]\w*", q.text)))
    snake = [w for w in words if re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", w)]
    consts = [w for w in words if re.fullmatch(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)+", w)]
    if re.search(r"\bdefault\b|called without", lower) and snake:
        return CodeAsk("default", tuple(w for w in words if len(w) > 1))
    if re.search(r"\bcall(s|ers?)?\b|\binvoke", lower) and snake:
        return CodeAsk("callers", (snake[0],))
    if consts and re.search(r"\bvalue|\binteger|\bnumber|\bresolve|\bevaluate", lower):
        return CodeAsk("final", (consts[0],))
    return None


def code_cell(rng: random.Random, ask: CodeAsk) -> str:
    if ask.op == "callers":
        (name,) = ask.names
        code = f"""
import re
call = re.compile(r"(?<![\\w.])" + {name!r} + r"\\s*\\(")
blocks, current = {{}}, None
for line in ctx.splitlines():
    if line[:1] not in ("", " ", "\\t"):
        m = re.match(r"def (\\w+)\\(", line)
        current = m.group(1) if m else None
    elif current and current != {name!r}:
        code = re.sub(r"\\"[^\\"]*\\"|'[^']*'", "''", line).split("#")[0]
        if call.search(code):
            blocks[current] = line.strip()
print(len(blocks), "callers")
for caller, line in sorted(blocks.items()):
    print(caller, "|", line)
if blocks:
    FINAL(sorted(blocks))
"""
        why = (
            "Python source: I find the callers in code, one block per top-level def, comments and strings cut.",
            "This is code; which functions call it is a question for a parser, not a reader.",
            "Source code: scan each top-level function's body for the call, ignoring comments and strings.",
        )
    elif ask.op == "final":
        (name,) = ask.names
        code = f"""
import re
lines = [(left, right.split("#")[0]) for left, right in re.findall(r"^([A-Z][A-Z0-9_]*) = (.+)$", ctx, re.M)]
needed, grew = {{{name!r}}}, True
while grew:
    more = {{n for left, right in lines if left in needed for n in re.findall(r"[A-Z][A-Z0-9_]*", right)}}
    grew = not more <= needed
    needed |= more
env = {{}}
for left, right in lines:
    if left in needed:
        print(left, "=", right)
        env[left] = eval(right, {{}}, env)
if {name!r} in env:
    FINAL(env[{name!r}])
"""
        why = (
            "Python source: I run the top-level assignments that lead to the constant, in document order.",
            "A module constant's final value: its assignments and those it depends on, executed in order.",
            "This is code; the constant's value comes from running its top-level assignments in order.",
        )
    else:
        code = f"""
import re
words = {list(ask.names)!r}
found = []
for func in words:
    for sig in re.findall(r"^def " + func + r"\\((.*)\\):$", ctx, re.M):
        found += [(func, p, m.group(1)) for p in words if (m := re.search(r"(?<!\\w)" + p + r"=([^,)]+)", sig))]
print(found)
if found:
    FINAL(found[0][2])
"""
        why = (
            "Python source: the default is in the function's def line; I find it in code.",
            "A parameter's default is written in the signature: search the def lines for the question's names.",
            "This is code; I read the signature with a regex rather than asking a reader.",
        )
    return turn(rng, why, code)
