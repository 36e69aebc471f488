"""Shared helpers for the sandbox tests: short-timeout configs per isolation mode and a counting LLM handler."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass, field

import pytest

from fathom.sandbox import IsolationError, LLMRequest, Sandbox, SandboxConfig
from fathom.sandbox.proctree import pid_alive

MODES = ("bwrap", "plain", "unsafe-dev")


def config(mode: str = "auto", **overrides: object) -> SandboxConfig:
    """Small, fast limits: soft 1 s / hard 3 s, 256 MiB, 16 MiB disk, 2000 output chars, 20 llm calls."""
    values: dict = dict(
        isolation=mode, soft_timeout_s=1.0, hard_timeout_s=3.0, memory_mb=256, disk_mb=16,
        max_output_chars=2000, max_answer_chars=500, max_llm_calls=20, max_llm_chars=10_000, max_batch=64,
    )  # fmt: skip
    if mode == "unsafe-dev":
        values["min_isolation"] = ()
    values.update(overrides)
    return SandboxConfig(**values)


@dataclass
class Recorder:
    """An LLM handler that echoes and remembers every batch it was given."""

    batches: list[list[LLMRequest]] = field(default_factory=list)
    delay_s: float = 0.0

    @property
    def calls(self) -> int:
        return sum(len(b) for b in self.batches)

    async def __call__(self, requests: list[LLMRequest]) -> list[str]:
        self.batches.append(list(requests))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if any(r.prompt == "boom" for r in requests):
            raise ConnectionError("sub-LM backend unreachable")
        return [f"echo {r.prompt} [{len(r.chunk)}]" for r in requests]


def mode_supported(mode: str) -> str | None:
    """None if a sandbox starts in this mode at the default floor here, else the reason to skip."""
    if mode == "bwrap" and shutil.which("bwrap") is None:
        return "bubblewrap is not installed"

    async def probe() -> None:
        sandbox = await Sandbox.start(None, config(mode), ctx_text="")
        await sandbox.close()

    try:
        asyncio.run(probe())
    except IsolationError as e:
        return str(e)
    return None


@pytest.fixture(scope="session")
def mode_support() -> dict[str, str | None]:
    """mode -> None when supported here, else why not (probed once per session)."""
    return {m: mode_supported(m) for m in MODES}


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest, mode_support: dict[str, str | None]) -> str:
    reason = mode_support[request.param]
    if reason is not None:
        pytest.skip(f"{request.param} not supported here: {reason}")
    return request.param


def real_uid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return None


def processes_of_uid(uid: int) -> list[int]:
    return [
        int(p) for p in os.listdir("/proc") if p.isdigit() and real_uid(int(p)) == uid and pid_alive(int(p))
    ]
