"""Teacher slips: a share of the teacher's turns first written in a faulty form a small student really
writes, then repaired after reading the traceback, so SFT transcripts show an error being read and fixed.

`with_slips(game, key, share, log)` wraps a teacher strategy (``obs = yield turn_text``). Whether the j-th
cell of the game slips is drawn from ``key`` (the run seed and the question) and j alone, so the teacher
stays a pure function of the conversation. A slipped cell is emitted as one of:

- ``name``: its first statement reads a name an earlier cell defined under another name (`NameError`, as
  when the student uses ``replies`` after the cell defining it failed); nothing of the cell runs before it.
- ``cut``: the cell is cut short inside an open bracket (`SyntaxError`, as a cell cut at the new-token
  limit); nothing of it runs.

The next turn reads the error line from the observation, names it in its thought and writes the cell as
the game meant it; then the game goes on as without the slip. ``log`` receives, per emitted turn, whether
it was a slip: SFT masks those turns (`fathom.train.sft_collect`). A slipped cell that does not fail is a
bug here and raises. This module does not decide which move the teacher plays.
"""

from __future__ import annotations

import ast
import builtins
import random
import re
from collections.abc import Generator

Play = Generator[str, str, None]
ERROR_LINE = re.compile(r"^(NameError|SyntaxError): (.*)$", re.M)
CELL = re.compile(r"\A(.*?)\n```repl\n(.*)\n```\Z", re.S)


def slipped(key: str, index: int, share: float) -> bool:
    """Whether the game's `index`-th cell slips: a draw of its own, so other cells' draws do not move it."""
    return share > 0 and random.Random(f"slip/{key}/{index}").random() < share


def stored_names(code: str) -> set[str]:
    """The names a cell binds at any depth (assignments, loops, imports, definitions)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _eager_loads(node: ast.AST) -> list[ast.Name]:
    """The names an expression surely evaluates, in source order: not inside a lambda, a comprehension's
    body or conditions, or the right side of a conditional or boolean operator (those may never run)."""
    if isinstance(node, ast.Name):
        return [node] if isinstance(node.ctx, ast.Load) else []
    if isinstance(node, ast.Lambda):
        return []
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        return _eager_loads(node.generators[0].iter)
    if isinstance(node, ast.BoolOp):
        return _eager_loads(node.values[0])
    if isinstance(node, ast.IfExp):
        return _eager_loads(node.test)
    return [n for child in ast.iter_child_nodes(node) for n in _eager_loads(child)]


def _misnamed(code: str, earlier: set[str], rng: random.Random) -> tuple[str, str, str] | None:
    """(faulty code, wrong name, right name): the first statement past the imports reads a name an earlier
    cell bound, here under another name; None when there is no such statement."""
    tree = ast.parse(code)
    first = next((s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))), None)
    if isinstance(first, ast.Assign):
        value: ast.AST | None = first.value
    elif isinstance(first, ast.For):
        value = first.iter
    elif isinstance(first, ast.Expr):
        value = first.value
    else:
        return None
    bound_before = {n for s in tree.body[: tree.body.index(first)] for n in stored_names(ast.unparse(s))}
    loads = [n for n in _eager_loads(value) if n.id in earlier - bound_before - {"ctx"}]
    if not loads:
        return None
    target = loads[0]
    wrong = f"{rng.choice(('all_', 'doc_', 'my_'))}{target.id}"
    if wrong in earlier or hasattr(builtins, wrong):
        return None
    lines = code.split("\n")
    line = lines[target.lineno - 1]
    lines[target.lineno - 1] = line[: target.col_offset] + wrong + line[target.end_col_offset :]
    return "\n".join(lines), wrong, target.id


def _cut(code: str, rng: random.Random) -> str:
    """The cell cut short inside an open bracket, in its last half where one opens: a SyntaxError."""
    opens = [i + 1 for i, c in enumerate(code) if c in "([{"]
    late = [i for i in opens if i >= len(code) // 2] or opens
    for at in sorted(late, key=lambda i: (rng.random(), i)):
        try:
            compile(code[:at], "<cell>", "exec")
        except SyntaxError:
            return code[:at]
    raise ValueError(f"no cut of this cell fails to parse:\n{code}")


def faulty(turn: str, earlier: set[str], rng: random.Random) -> tuple[str, str]:
    """(the faulty turn, the right name when the fault is a misnamed one, else "")."""
    m = CELL.match(turn)
    if m is None:
        raise ValueError(f"a teacher turn that is not a thought and one ```repl cell:\n{turn}")
    thought, code = m.groups()
    if rng.random() < 0.5 and (misnamed := _misnamed(code, earlier, rng)):
        return f"{thought}\n```repl\n{misnamed[0]}\n```", misnamed[2]
    return f"{thought}\n```repl\n{_cut(code, rng)}\n```", ""


def recovery(turn: str, observation: str, right: str, rng: random.Random) -> str:
    """The turn as the game meant it, its thought naming the error the observation shows."""
    m = ERROR_LINE.search(observation)
    if m is None:
        raise ValueError(f"a slipped cell ran without the error it was written to raise:\n{observation}")
    error = f"{m.group(1)}: {m.group(2)}"
    # Short: the repaired cell is as long as the one the game meant, and its turn must fit the same budget.
    if m.group(1) == "NameError":
        why = rng.choice(
            (f"the earlier cell named it `{right}`.", f"I meant `{right}`, the earlier cell's name.")
        )
    else:
        why = rng.choice(
            ("it was cut off, so I write it again whole.", "it stopped mid-line; I write it whole.")
        )
    code = CELL.match(turn).group(2)  # type: ignore[union-attr]  # faulty() has matched this turn
    return f"The cell failed with {error}; {why}\n```repl\n{code}\n```"


def with_slips(game: Play, key: str, share: float, log: list[bool] | None = None) -> Play:
    """The game's turns, each `slipped` one first in a faulty form and then repaired (see the module)."""
    log = [] if log is None else log
    earlier: set[str] = set()
    try:
        text = next(game)
    except StopIteration:
        return
    index = 0
    while True:
        if slipped(key, index, share):
            rng = random.Random(f"slip-form/{key}/{index}")
            wrong, right = faulty(text, earlier, rng)
            log.append(True)
            obs = yield wrong
            log.append(False)
            obs = yield recovery(text, obs, right, rng)
        else:
            log.append(False)
            obs = yield text
        earlier |= stored_names(CELL.match(text).group(2))  # type: ignore[union-attr]
        index += 1
        try:
            text = game.send(obs)
        except StopIteration:
            return
