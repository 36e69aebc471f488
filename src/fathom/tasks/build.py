"""Build a dataset: train / eval / heldout task files plus their documents, deterministically.

Layout of the output folder::

    train.jsonl  eval.jsonl  heldout.jsonl     one task per line (`fathom.tasks.schema`)
    heldout_unseen.jsonl                       tasks of the unseen families only (`UNSEEN_FAMILIES`)
    docs/<id>.txt                              every document, referenced by `document_path`
    build.json                                 the build's parameters and the corpora digests

Every document goes to a file (none inline), so consumers handle one case and the sandbox can bind each
file read-only. Task ``i`` of a split takes the ``i``-th cell of the grid lengths x difficulties x families
(families vary fastest), so every split is balanced, and its seed is drawn from a stream of its own:
``sha256("fathom/<seed>/<split>/<i>/<attempt>")``. Splits never share a document or a question: a task
whose document or question text is already used anywhere in the build (any split, this one included) is
redrawn with the next attempt, and `check_disjoint` verifies both. Every family's questions name
something of their own document (a random key, a value, the record count and date span, the story's fact
count), so redraws are rare.

Train, eval and heldout (in-distribution) draw only from `SEEN_FAMILIES`; ``heldout_unseen`` only from
`UNSEEN_FAMILIES`, which no training data may use: `build_dataset` refuses a spec that mixes them up.

The same arguments and corpora give byte-identical files. Stale ``docs/*.txt`` from earlier builds into
the same folder are removed. This module does not parse command lines (see `fathom.tasks.cli`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from fathom.tasks import SEEN_FAMILIES, UNSEEN_FAMILIES, generate_task, refuse_unseen, validate_task
from fathom.tasks.corpora import read_manifest
from fathom.tasks.family import DIFFICULTIES
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Task, write_tasks

SPLITS = ("train", "eval", "heldout", "heldout_unseen")
UNSEEN_SPLIT = "heldout_unseen"
DEFAULT_COUNTS = {"train": 1000, "eval": 200, "heldout": 500, "heldout_unseen": 300}
DEFAULT_LENGTHS = {
    "train": (8192, 16384, 32768),
    "eval": (8192, 16384, 32768),
    "heldout": (8192, 32768, 131072),  # add 1M with --heldout-lengths 8K,32K,128K,1M
    "heldout_unseen": (8192, 32768, 131072),
}
DOCS_DIR = "docs"
MAX_ATTEMPTS = 100


@dataclass(frozen=True)
class SplitSpec:
    name: str
    count: int
    lengths: tuple[int, ...]
    families: tuple[str, ...] = ()  # empty: SEEN_FAMILIES, or UNSEEN_FAMILIES for the unseen split
    difficulties: tuple[str, ...] = DIFFICULTIES

    def __post_init__(self) -> None:
        if not self.families:
            default = UNSEEN_FAMILIES if self.name == UNSEEN_SPLIT else SEEN_FAMILIES
            object.__setattr__(self, "families", default)
        if self.name == UNSEEN_SPLIT:
            seen = sorted(set(self.families) - set(UNSEEN_FAMILIES))
            if seen:
                raise ValueError(
                    f"the {UNSEEN_SPLIT} split takes only unseen families, not {', '.join(seen)}"
                )
        else:
            refuse_unseen(self.families, f"split {self.name!r}")

    def cell(self, index: int) -> tuple[str, int, str]:
        """(family, length, difficulty) of task `index`; families vary fastest, then difficulty."""
        f, d, n = len(self.families), len(self.difficulties), len(self.lengths)
        return (
            self.families[index % f],
            self.lengths[(index // (f * d)) % n],
            self.difficulties[(index // f) % d],
        )


def task_seed(seed: int, split: str, index: int, attempt: int = 0) -> int:
    """A 63-bit seed from the split's own stream (splits can never collide by seed arithmetic)."""
    digest = hashlib.sha256(f"fathom/{seed}/{split}/{index}/{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build_dataset(
    out: str | Path,
    seed: int,
    specs: Sequence[SplitSpec],
    corpora: Corpora,
    validate: bool = True,
    progress: bool = True,
) -> dict[str, list[Task]]:
    """Generate, validate and write every split; return the written tasks per split."""
    out = Path(out)
    (out / DOCS_DIR).mkdir(parents=True, exist_ok=True)
    used: set[str] = set()  # sha256 of every document and of every question text so far
    result: dict[str, list[Task]] = {}
    for spec in specs:
        tasks: list[Task] = []
        for index in tqdm(range(spec.count), desc=spec.name, unit="task", disable=not progress):
            family, length, difficulty = spec.cell(index)
            task_id = f"{spec.name}-{index:05d}-{family}"
            for attempt in range(MAX_ATTEMPTS):
                task = generate_task(
                    family, task_seed(seed, spec.name, index, attempt), length, difficulty, corpora
                )
                document = _digest(task.document)  # type: ignore[arg-type]
                keys = {f"document:{document}", f"question:{_digest(task.question)}"}
                if not keys & used:
                    break
            else:
                raise RuntimeError(f"{task_id}: every attempt repeated an earlier document or question")
            used |= keys
            if validate:
                validate_task(task)
            rel = f"{DOCS_DIR}/{task_id}.txt"
            with (out / rel).open("w", encoding="utf-8", newline="") as f:
                f.write(task.document)  # type: ignore[arg-type]
            tasks.append(replace(task, id=task_id, document=None, document_path=rel, base_dir=out.resolve()))
        result[spec.name] = write_tasks(out / f"{spec.name}.jsonl", tasks, docs_dir=DOCS_DIR)
    keep = {t.document_path for tasks in result.values() for t in tasks}
    for stale in (out / DOCS_DIR).glob("*.txt"):
        if f"{DOCS_DIR}/{stale.name}" not in keep:
            stale.unlink()
    manifest = read_manifest(corpora.root)
    info = {
        "seed": seed,
        "splits": {
            s.name: {
                "count": s.count,
                "lengths": s.lengths,
                "families": s.families,
                "difficulties": s.difficulties,
            }
            for s in specs
        },
        "corpora": {k: v["sha256"] for k, v in manifest["sources"].items()} if manifest else None,
    }
    (out / "build.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    check_disjoint(result)
    return result


def check_disjoint(splits: Mapping[str, Sequence[Task]]) -> None:
    """Raise ValueError if two tasks (in one split or across splits) share an id, a document or a question."""
    documents: dict[str, str] = {}
    questions: dict[str, str] = {}
    ids: set[str] = set()
    for name, tasks in splits.items():
        for task in tasks:
            if task.id in ids:
                raise ValueError(f"task id {task.id} appears twice")
            ids.add(task.id)
            digest = _digest(task.read_document())
            if digest in documents:
                raise ValueError(f"{name} task {task.id} has the same document as {documents[digest]}")
            documents[digest] = task.id
            if task.question in questions:
                raise ValueError(f"{name} task {task.id} has the same question as {questions[task.question]}")
            questions[task.question] = task.id
