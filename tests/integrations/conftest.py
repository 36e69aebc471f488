"""Shared by the integration tests: the server tests' helpers (a real uvicorn server on loopback, a
`fathom serve` subprocess) and small niah tasks with their gold answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))  # server_support
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))  # tiny_tool_model

from fathom.tasks import Task, generate_task, write_tasks

LENGTH = 2048


@pytest.fixture(scope="session")
def niah_tasks() -> list[Task]:
    return [generate_task("niah", seed, LENGTH) for seed in (3, 4)]


@pytest.fixture(scope="session")
def task_file(niah_tasks, tmp_path_factory) -> Path:
    """The tasks written as a task file with their documents in files beside it (as `fathom data build`)."""
    path = tmp_path_factory.mktemp("tasks") / "tasks.jsonl"
    write_tasks(path, niah_tasks)
    return path
