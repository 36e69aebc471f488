"""The grounding check: a policy's code may search only for what the question says or what it has seen.

`check_trace(trace)` reads an episode's trace (``first`` = the first user message, ``turns[i]["text"]`` =
the policy's turn, ``turns[i]["observation"]`` = what the environment printed back) and returns a
`Grounding`: for every code block, every string literal used as a pattern must appear in the question or
in an observation printed *before* that turn. A literal is a pattern wherever it is not plain prose:
``print(...)`` arguments, the prompt of ``llm`` / ``llm_batch`` (written in the call, or assigned to the
name the call is given) and the separator of ``str.join`` are prose; everything else (regexes,
``str.find`` / ``in`` / ``split`` arguments, dict keys, list items, answers given to ``FINAL``) is checked.

A regex literal is reduced to its literal runs first (character classes, escapes such as ``\\d``, groups,
quantifiers, anchors and alternation are syntax; ``\\.`` is a dot); each run must be seen. Runs of only
punctuation and whitespace, or of at most `GENERIC_CHARS` characters, are generic (``"\\n"``, ``": "``,
``" || "``) and always pass. So ``re.findall(r"numbers for brave-falcon is: (\\d{7})", ctx)`` is grounded
once the question names brave-falcon and an observation has shown ``numbers for ... is:`` text.

What the policy itself asked its reader counts as seen in later turns: the prose of its ``llm`` /
``llm_batch`` prompts (`asked`). A policy knows the reply it asked for ("reply: not found" when the text does
not hold the answer), so a later cell may test a reply for it.

`check_code(code, seen)` is the same test for one block. Both are pure. This module does not decide what
to do with an ungrounded transcript (SFT drops it and counts it: `fathom.policies.teacher`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fathom.env.parsing import code_blocks

GENERIC_CHARS = 2
REGEX_FUNCS = frozenset({"compile", "search", "match", "fullmatch", "findall", "finditer", "split", "sub"})
_REGEX_ESCAPE = re.compile(r"\\([dDwWsSbBAZnrtfv]|\d+|.)")
_PUNCTUATION = re.compile(r"[\W_]*")


@dataclass(frozen=True)
class Violation:
    turn: int  # 0-based policy turn
    literal: str  # the string as written in the code
    fragment: str  # the part of it that was never seen


@dataclass(frozen=True)
class Grounding:
    literals: int  # pattern literals checked
    violations: tuple[Violation, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "literals": self.literals,
            "violations": [
                {"turn": v.turn, "literal": v.literal, "fragment": v.fragment} for v in self.violations
            ],
        }


def regex_fragments(pattern: str) -> list[str]:
    """The literal runs of a regex: what text must contain for the pattern to match it, roughly."""
    out, run, i, depth = [], [], 0, 0
    pattern = re.sub(r"\(\?[a-zA-Z]+\)", "", pattern)  # inline flags (?i)

    def flush() -> None:
        if run:
            out.append("".join(run))
            run.clear()

    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            m = _REGEX_ESCAPE.match(pattern, i)
            esc = m.group(1) if m else ""
            i = m.end() if m else i + 1
            if len(esc) == 1 and not esc.isalnum():
                run.append(esc)  # an escaped metacharacter: a literal dot, bracket, space...
            else:
                flush()  # \d, \w, \b, \n, a backreference: syntax, not text
            continue
        if c == "[":
            flush()
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if c == "(":
            flush()
            depth += 1
            m = re.match(r"\(\?(?:P<\w+>|<\w+>|[:=!]|<[=!])?", pattern[i:])
            i += len(m.group(0)) if m and m.group(0) != "(" else 1
            continue
        if c in ")|^$.":
            flush()
            depth -= c == ")"
            i += 1
            continue
        if c in "*+?":
            if run:  # the quantified character is optional or repeated: not a fixed part of the text
                run.pop()
            flush()
            i += 1
            continue
        if c == "{" and (m := re.match(r"\{\d*,?\d*\}", pattern[i:])):
            if run:
                run.pop()
            flush()
            i += len(m.group(0))
            continue
        run.append(c)
        i += 1
    flush()
    return out


def is_generic(fragment: str) -> bool:
    """Too short or too plain to name anything: punctuation, whitespace, strftime directives."""
    bare = re.sub(r"%[a-zA-Z]", "", fragment)
    return len(bare.strip()) <= GENERIC_CHARS or _PUNCTUATION.fullmatch(bare) is not None


def _unseen(fragments: list[str], seen: str) -> str | None:
    for fragment in fragments:
        if not is_generic(fragment) and fragment.strip() not in seen:
            return fragment
    return None


def _func_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _text_parts(node: ast.AST) -> Iterator[int]:
    """Ids of the string constants that make up a text expression itself: a literal, the literal parts of
    an f-string, either side of a concatenation; not the constants of calls inside it (print(re.findall(
    "pattern", ctx)) still searches for "pattern")."""
    if isinstance(node, ast.Constant):
        yield id(node)
    elif isinstance(node, ast.JoinedStr):
        yield from (id(v) for v in node.values if isinstance(v, ast.Constant))
    elif isinstance(node, ast.BinOp):
        yield from _text_parts(node.left)
        yield from _text_parts(node.right)


def _prompts(node: ast.Call) -> list[ast.AST]:
    """The prompt expressions of an ``llm(prompt, chunk)`` or ``llm_batch([(prompt, chunk), ...])`` call."""
    name = _func_name(node.func)
    if name == "llm":
        return node.args[:1]
    if name == "llm_batch":
        return [t.elts[0] for a in node.args for t in ast.walk(a) if isinstance(t, ast.Tuple) and t.elts]
    return []


def _block_prompts(tree: ast.AST) -> list[ast.AST]:
    """The prompt expressions of every ``llm`` / ``llm_batch`` call in a block. A prompt named first (``ask =
    <prompt>``, then ``llm_batch([(ask, chunk) for chunk in chunks])``) is the value assigned to that name."""
    assigned: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node.value)
    prompts: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for p in _prompts(node):
                prompts.extend(assigned.get(p.id, []) if isinstance(p, ast.Name) else [p])
    return prompts


def asked(code: str) -> str:
    """The literal text of the prompts a code block gives ``llm`` / ``llm_batch``, one per line."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return ""
    parts = {id(n): n for n in ast.walk(tree)}
    ids = [i for p in _block_prompts(tree) for i in _text_parts(p)]
    return "\n".join(str(parts[i].value) for i in ids)


def _pattern_literals(tree: ast.AST) -> Iterator[tuple[str, bool]]:
    """(literal, used as a regex) for every string constant outside prose positions."""
    prose: set[int] = {i for p in _block_prompts(tree) for i in _text_parts(p)}
    regex: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            prose.add(id(node.value))  # a bare string statement: a docstring or comment
        if not isinstance(node, ast.Call):
            continue
        name = _func_name(node.func)
        targets: list[ast.AST] = []  # llm() / llm_batch() prompts are already prose (_block_prompts)
        if name == "print":
            targets = [*node.args, *(k.value for k in node.keywords)]
        elif name == "join" and isinstance(node.func, ast.Attribute):
            targets = [node.func.value]  # the separator
        for target in targets:
            prose.update(_text_parts(target))
        if targets:
            continue
        func = node.func
        on_re = isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "re"
        if name in REGEX_FUNCS and on_re and node.args:
            regex.update(id(sub) for sub in ast.walk(node.args[0]))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            yield node.value, id(node) in regex


def check_code(code: str, seen: str, turn: int = 0) -> tuple[int, list[Violation]]:
    """(pattern literals checked, the ungrounded ones) of one code block, given the text seen before it.

    Code that does not parse has no literals to check (it cannot run either)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return 0, []
    checked, violations = 0, []
    for literal, as_regex in _pattern_literals(tree):
        checked += 1
        plain = _unseen([literal], seen)
        if plain is None:
            continue
        # Used as a regex, or a string later compiled into one: its literal runs must each be seen.
        missing = _unseen(regex_fragments(literal), seen) if as_regex or "\\" in literal else plain
        if missing is not None:
            violations.append(Violation(turn, literal, missing))
    return checked, violations


def check_trace(trace: Mapping[str, Any]) -> Grounding:
    """Grounding of a whole episode (see the module docstring); `first` is the first user message."""
    seen = str(trace.get("first") or "")
    checked, violations = 0, []
    for turn, record in enumerate(trace.get("turns", [])):
        for code in code_blocks(str(record.get("text") or "")):
            n, bad = check_code(code, seen, turn)
            checked += n
            violations += bad
            seen += "\n" + asked(code)
        seen += "\n" + str(record.get("observation") or "")
    return Grounding(checked, tuple(violations))
