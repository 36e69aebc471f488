"""`fathom data`: build corpora, build datasets, check and show task files.

    fathom data corpora [--dir DIR] [--force]
    fathom data build --out DIR [--seed S] [--train N] [--eval N] [--heldout N] [--heldout-unseen N]
                      [--families F ...] [--unseen-families F ...]
                      [--lengths L ...] [--train-lengths L ...] [--eval-lengths L ...]
                      [--heldout-lengths L ...] [--heldout-unseen-lengths L ...]
                      [--difficulties D ...] [--corpora DIR] [--no-validate] [--no-progress]
    fathom data check FILE [FILE ...] [--validate]
    fathom data show FILE [--id ID] [--chars N]
    fathom data sample FAMILY [--seed S] [--length L] [--difficulty D] [--chars N]

Lists take spaces or commas (``--lengths 8K 32K`` or ``--lengths 8K,32K``); lengths take K/M suffixes
(binary: 8K = 8192, 1M = 1048576). This module only parses arguments and prints; the work is elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fathom.tasks import FAMILIES, SEEN_FAMILIES, UNSEEN_FAMILIES, generate_task, validate_task
from fathom.tasks.build import (
    DEFAULT_COUNTS,
    DEFAULT_LENGTHS,
    SPLITS,
    UNSEEN_SPLIT,
    SplitSpec,
    build_dataset,
)
from fathom.tasks.corpora import DEFAULT_CORPORA_DIR, CorpusMissingError, build_corpora
from fathom.tasks.family import DEFAULT_DIFFICULTY, DIFFICULTIES, InvalidTaskError
from fathom.tasks.haystack import Corpora, format_length, parse_length
from fathom.tasks.schema import Task, read_task_file


def _items(values: list[str] | None) -> list[str]:
    return [v for value in values or [] for v in value.split(",") if v.strip()]


def _choices(values: list[str] | None, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    chosen = tuple(_items(values)) or known
    unknown = [v for v in chosen if v not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)}; known: {', '.join(known)}")
    return chosen


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="build corpora and task datasets; check and show task files")
    sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")

    p = sub.add_parser("corpora", help="download, extract and clean the haystack corpora (idempotent)")
    p.add_argument(
        "--dir", type=Path, default=DEFAULT_CORPORA_DIR, help="output folder (default %(default)s)"
    )
    p.add_argument("--force", action="store_true", help="rebuild even if the manifest matches")
    p.set_defaults(func=_corpora)

    p = sub.add_parser("build", help="write train/eval/heldout/heldout_unseen task files and their documents")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0, help="dataset seed (default %(default)s)")
    for split in SPLITS:
        p.add_argument(
            f"--{split.replace('_', '-')}",
            type=int,
            default=DEFAULT_COUNTS[split],
            help="number of tasks (default %(default)s)",
        )
    p.add_argument(
        "--families",
        nargs="+",
        help=f"families of train/eval/heldout (default every seen one: {', '.join(SEEN_FAMILIES)})",
    )
    p.add_argument(
        "--unseen-families",
        nargs="+",
        help=f"families of heldout_unseen (default all unseen: {', '.join(UNSEEN_FAMILIES)})",
    )
    p.add_argument("--difficulties", nargs="+", help=f"difficulties (default all: {', '.join(DIFFICULTIES)})")
    p.add_argument("--lengths", nargs="+", help="lengths in tokens for every split, e.g. 8K 32K 1M")
    for split in SPLITS:
        default = " ".join(format_length(n) for n in DEFAULT_LENGTHS[split])
        p.add_argument(
            f"--{split.replace('_', '-')}-lengths",
            nargs="+",
            help=f"lengths of the {split} split (default {default})",
        )
    p.add_argument(
        "--corpora", type=Path, default=DEFAULT_CORPORA_DIR, help="corpora folder (default %(default)s)"
    )
    p.add_argument("--no-validate", action="store_true", help="skip each task's validate() (faster)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_build)

    p = sub.add_parser("check", help="check task files against the schema; exit 1 if any line is bad")
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--validate", action="store_true", help="also run each built-in family's validate()")
    p.set_defaults(func=_check)

    p = sub.add_parser("show", help="print tasks of a file with the start of their documents")
    p.add_argument("file", type=Path)
    p.add_argument("--id", help="only this task")
    p.add_argument("--limit", type=int, default=3, help="tasks to show without --id (default %(default)s)")
    p.add_argument(
        "--chars", type=int, default=600, help="document characters to print (default %(default)s)"
    )
    p.set_defaults(func=_show)

    p = sub.add_parser("sample", help="generate one task and print it")
    p.add_argument("family", choices=list(FAMILIES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--length", default="8K", help="tokens, e.g. 8192, 8K, 1M (default %(default)s)")
    p.add_argument("--difficulty", choices=DIFFICULTIES, default=DEFAULT_DIFFICULTY)
    p.add_argument("--chars", type=int, default=600)
    p.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA_DIR)
    p.set_defaults(func=_sample)


def _corpora(args: argparse.Namespace) -> int:
    try:
        build_corpora(args.dir, force=args.force)
    except CorpusMissingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _build(args: argparse.Namespace) -> int:
    unseen_asked = sorted(set(_items(args.families)) & set(UNSEEN_FAMILIES))
    if unseen_asked:
        raise SystemExit(
            f"unknown families: {', '.join(unseen_asked)} are unseen families, kept out of train/eval/heldout "
            "(give them with --unseen-families)"
        )
    families = _choices(args.families, SEEN_FAMILIES, "families")
    unseen = _choices(args.unseen_families, UNSEEN_FAMILIES, "unseen families")
    difficulties = _choices(args.difficulties, DIFFICULTIES, "difficulties")
    specs = []
    for split in SPLITS:
        raw = _items(getattr(args, f"{split}_lengths")) or _items(args.lengths)
        lengths = tuple(parse_length(x) for x in raw) or DEFAULT_LENGTHS[split]
        chosen = unseen if split == UNSEEN_SPLIT else families
        specs.append(SplitSpec(split, getattr(args, split), lengths, chosen, difficulties))
    try:
        result = build_dataset(
            args.out,
            args.seed,
            specs,
            Corpora(args.corpora),
            validate=not args.no_validate,
            progress=not args.no_progress,
        )
    except CorpusMissingError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{name} {len(tasks)}" for name, tasks in result.items())
    print(f"wrote {counts} tasks to {args.out}")
    return 0


def _check(args: argparse.Namespace) -> int:
    bad = 0
    for path in args.files:
        if not path.is_file():
            print(f"{path}: no such file", file=sys.stderr)
            bad += 1
            continue
        tasks, problems = read_task_file(path)
        for line, reason in problems:
            print(f"{path}:{line}: {reason}")
        bad += len(problems)
        if args.validate:
            for task in tasks:
                try:
                    validate_task(task)
                except (InvalidTaskError, KeyError) as e:
                    print(f"{path}: task {task.id}: {e}")
                    bad += 1
        print(f"{path}: {len(tasks)} good task(s), {len(problems)} bad line(s)", file=sys.stderr)
    return 1 if bad else 0


def _print_task(task: Task, chars: int) -> None:
    doc = task.read_document()
    where = "inline" if task.document is not None else str(task.document_file())
    print(f"== {task.id}  [{task.family} / {task.difficulty} / {format_length(task.length_tokens)} tokens]")
    print(f"question: {task.question}")
    print(f"answer:   {task.answer!r}  (metric {task.metric})")
    print(f"document: {task.length_chars:,} chars, {where}; meta {task.meta}")
    print(doc[:chars] + ("\n[...]" if len(doc) > chars else ""))


def _show(args: argparse.Namespace) -> int:
    tasks, problems = read_task_file(args.file)
    for line, reason in problems:
        print(f"{args.file}:{line}: {reason}", file=sys.stderr)
    chosen = [t for t in tasks if t.id == args.id] if args.id else tasks[: args.limit]
    if args.id and not chosen:
        print(f"no task with id {args.id!r} in {args.file}", file=sys.stderr)
        return 1
    for task in chosen:
        _print_task(task, args.chars)
    return 1 if problems else 0


def _sample(args: argparse.Namespace) -> int:
    task = generate_task(
        args.family, args.seed, parse_length(args.length), args.difficulty, Corpora(args.corpora)
    )
    validate_task(task)
    _print_task(task, args.chars)
    return 0
