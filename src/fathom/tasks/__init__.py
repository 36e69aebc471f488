"""Long-context tasks: seeded generators over real haystacks, a JSONL task format, and dataset builds.

Public API::

    FAMILIES: dict[str, Family]          # name -> family (generate / solve / wrong_answers / validate)
    generate_task(family, seed, length_tokens, difficulty="medium", corpora=None) -> Task   # inline doc
    validate_task(task, document=None) -> None        # raises InvalidTaskError
    load_tasks(path) -> list[Task]                    # raises TaskFileError naming every bad line
    write_tasks(path, tasks, docs_dir="docs", inline_max_chars=0) -> list[Task]
    Task.read_document(base_dir=None) -> str; Task.document_file(base_dir=None) -> Path | None

Families: niah, multikey, vartrack, oolong, pairs, babi, keychain (each module's docstring gives its
formats and what an expert policy uses). Corpora are built by `fathom data corpora`
(`fathom.tasks.corpora`); datasets by `fathom data build` (`fathom.tasks.build`).

This package does not score model answers (see `fathom.reward.metrics`) or run documents in a sandbox.
"""

from __future__ import annotations

from pathlib import Path

from fathom.tasks import babi, keychain, multikey, niah, oolong, pairs, vartrack
from fathom.tasks.corpora import CorpusMissingError, build_corpora
from fathom.tasks.family import DEFAULT_DIFFICULTY, DIFFICULTIES, Family, InvalidTaskError
from fathom.tasks.haystack import Corpora, estimate_tokens, parse_length
from fathom.tasks.schema import Task, TaskFileError, load_tasks, read_task_file, write_tasks

FAMILIES: dict[str, Family] = {
    m.FAMILY.name: m.FAMILY for m in (niah, multikey, vartrack, oolong, pairs, babi, keychain)
}

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
    """Run the task's family `validate()`; raises InvalidTaskError (or KeyError for unknown families)."""
    if task.family not in FAMILIES:
        raise KeyError(f"unknown family {task.family!r}; known: {', '.join(FAMILIES)}")
    FAMILIES[task.family].validate(task, document)


__all__ = [
    "DIFFICULTIES",
    "FAMILIES",
    "Corpora",
    "CorpusMissingError",
    "Family",
    "InvalidTaskError",
    "Task",
    "TaskFileError",
    "build_corpora",
    "estimate_tokens",
    "generate_task",
    "load_tasks",
    "parse_length",
    "read_task_file",
    "validate_task",
    "write_tasks",
]
