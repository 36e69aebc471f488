"""Long-context tasks: seeded generators over real haystacks, a JSONL task format, and dataset builds.

Public API::

    FAMILIES: dict[str, Family]          # name -> family (generate / solve / wrong_answers / validate)
    generate_task(family, seed, length_tokens, difficulty="medium", corpora=None) -> Task   # inline doc
    validate_task(task, document=None) -> None        # raises InvalidTaskError
    UNSEEN_FAMILIES / SEEN_FAMILIES; refuse_unseen(families, where)   # the unseen split's families
    load_tasks(path) -> list[Task]                    # raises TaskFileError naming every bad line
    write_tasks(path, tasks, docs_dir="docs", inline_max_chars=0) -> list[Task]
    Task.read_document(base_dir=None) -> str; Task.document_file(base_dir=None) -> Path | None

Families: niah, multikey, vartrack, oolong, pairs, babi, keychain, and the structured-document ones
(logs_count, logs_next, table_aggregate, table_compare, jsonl_lookup, jsonl_join, code_calls, code_value,
config_lookup, config_sections); each module's docstring gives its formats and what an expert uses. Corpora are built by `fathom data corpora`
(`fathom.tasks.corpora`); datasets by `fathom data build` (`fathom.tasks.build`).

This package does not score model answers (see `fathom.reward.metrics`) or run documents in a sandbox.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fathom.reward.metrics import score
from fathom.tasks import babi, keychain, multikey, niah, oolong, pairs, vartrack
from fathom.tasks.corpora import CorpusMissingError, build_corpora
from fathom.tasks.family import DEFAULT_DIFFICULTY, DIFFICULTIES, Family, InvalidTaskError
from fathom.tasks.haystack import Corpora, estimate_tokens, parse_length
from fathom.tasks.schema import Task, TaskFileError, load_tasks, read_task_file, write_tasks

FAMILIES: dict[str, Family] = {
    m.FAMILY.name: m.FAMILY for m in (niah, multikey, vartrack, oolong, pairs, babi, keychain)
}

# ---- structured-document families (branch families-a): logs, tables, JSON lines, source, configs ----
from fathom.tasks import (  # noqa: E402 (the registry reads better in one block)
    code,
    configs,
    jsonl,
    jsonl_join,
    logs,
    logs_next,
    table_compare,
    tables,
)

STRUCTURED_FAMILIES: tuple[Family, ...] = (
    logs.FAMILY,
    logs_next.FAMILY,
    tables.FAMILY,
    table_compare.FAMILY,
    jsonl.FAMILY,
    jsonl_join.FAMILY,
    *code.FAMILIES,
    *configs.FAMILIES,
)
FAMILIES.update({f.name: f for f in STRUCTURED_FAMILIES})
# ---- end of structured-document families ----

# --- families-b: prose-shaped documents (chat, e-mail, glossary, manual, bundle, changelog) ---
from fathom.tasks import bundle, chat, glossary, mail, manual  # noqa: E402 (kept in one block so the family branches merge cleanly)

FAMILIES_B: tuple[Family, ...] = (
    *chat.FAMILIES,
    *mail.FAMILIES,
    *glossary.FAMILIES,
    *manual.FAMILIES,
    *bundle.FAMILIES,
)
FAMILIES.update({f.name: f for f in FAMILIES_B})
# --- end families-b ---


# ---- unseen families: the headline split ----------------------------------------------------------
# No SFT or GRPO data ever use these: `fathom data build` writes them only to heldout_unseen.jsonl, and
# training task sources (`fathom.train.tasksource.TaskSource`) refuse them. Edit the names here only; a
# name that is not a registered family fails at import.
UNSEEN_FAMILIES: tuple[str, ...] = (
    "logs_next",  # log files: previous / next
    "table_compare",  # CSV/TSV: compare groups, existence, arg-max
    "jsonl_join",  # JSONL + CSV bundle: multi-hop joins, id lists
    "code_calls",  # source code: list the callers of a function
    "email_repliers",  # e-mail threads: the set of repliers (a join with the staff directory)
    "glossary_defined",  # glossaries: which listed words have entries (a set)
    "manual_count",  # markdown manuals: count options, compare two commands
)
_missing = sorted(set(UNSEEN_FAMILIES) - set(FAMILIES))
if _missing:
    raise ImportError(f"UNSEEN_FAMILIES names unregistered families: {', '.join(_missing)}")
# Every family that training may use, in registry order.
SEEN_FAMILIES: tuple[str, ...] = tuple(name for name in FAMILIES if name not in UNSEEN_FAMILIES)


class UnseenFamilyError(ValueError):
    """Training or SFT data were about to use a family kept for the unseen split."""


def refuse_unseen(families: Iterable[str], where: str) -> None:
    """Raise `UnseenFamilyError` if any of `families` is an unseen family (`where` names the source)."""
    found = sorted(set(families) & set(UNSEEN_FAMILIES))
    if found:
        raise UnseenFamilyError(
            f"{where} uses unseen families {', '.join(found)}: these are kept out of all training data "
            "(fathom.tasks.UNSEEN_FAMILIES); evaluate them with heldout_unseen.jsonl"
        )


def generate_task(
    family: str,
    seed: int,
    length_tokens: int,
    difficulty: str = DEFAULT_DIFFICULTY,
    corpora: Corpora | str | Path | None = None,
) -> Task:
    """One task with its document inline. Pure: the same arguments (and corpora) give the same task.

    `corpora` is a `Corpora` (reuse one across calls: it keeps each source's text after first use), a
    corpora directory, or None for the default directory.
    """
    if family not in FAMILIES:
        raise KeyError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    if length_tokens <= 0:
        raise ValueError(f"length_tokens must be positive, got {length_tokens}")
    if not isinstance(corpora, Corpora):
        corpora = Corpora() if corpora is None else Corpora(corpora)
    return FAMILIES[family].generate(seed, length_tokens, difficulty, corpora)


def validate_task(task: Task, document: str | None = None) -> None:
    """Run the task's family `validate()`; raises InvalidTaskError.

    A task of a family that no generator knows (a hand-written "custom" task) gets the checks that need
    no generator: its gold scores 1.0 against itself and `length_chars` is its document's length.
    """
    if task.family in FAMILIES:
        FAMILIES[task.family].validate(task, document)
        return
    if score(task.metric, task.answer, task.answer) != 1.0:
        raise InvalidTaskError(
            f"{task.id}: the gold answer {task.answer!r} does not score 1.0 against itself"
        )
    text = task.read_document() if document is None else document
    if len(text) != task.length_chars:
        raise InvalidTaskError(f"{task.id}: length_chars {task.length_chars} != document length {len(text)}")


__all__ = [
    "DIFFICULTIES",
    "FAMILIES",
    "SEEN_FAMILIES",
    "UNSEEN_FAMILIES",
    "Corpora",
    "CorpusMissingError",
    "Family",
    "InvalidTaskError",
    "Task",
    "TaskFileError",
    "UnseenFamilyError",
    "build_corpora",
    "estimate_tokens",
    "generate_task",
    "load_tasks",
    "parse_length",
    "read_task_file",
    "refuse_unseen",
    "validate_task",
    "write_tasks",
]
