"""Shared fixtures for the eval and report tests: task files on disk and the tiny model's chat format."""

from __future__ import annotations

from pathlib import Path

import pytest

from fathom.policies.expert import EXPERTS
from fathom.tasks import Corpora, build_corpora, generate_task, write_tasks
from fathom.tasks.corpora import DEFAULT_CORPORA_DIR


@pytest.fixture(scope="session")
def corpora() -> Corpora:
    build_corpora(DEFAULT_CORPORA_DIR, log=lambda _: None)  # a no-op once `make corpora` ran
    return Corpora(DEFAULT_CORPORA_DIR)


@pytest.fixture(scope="session")
def heldout_file(corpora: Corpora, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every family at 8K, 32K and 128K tokens (21 tasks), documents in files beside the task file."""
    path = tmp_path_factory.mktemp("data") / "heldout.jsonl"
    tasks = [
        generate_task(family, seed, length, corpora=corpora)
        for length in (8192, 32768, 131072)
        for seed, family in enumerate(sorted(EXPERTS))  # the families the expert has a program for
    ]
    write_tasks(path, tasks)
    return path


@pytest.fixture(scope="session")
def smol_chat():
    from fathom.models import ModelSpec, load_tokenizer
    from fathom.rollout import ChatFormat

    return ChatFormat(load_tokenizer(ModelSpec(name="tiny-smol")))
