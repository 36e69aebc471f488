"""Sandbox configuration, the values a cell returns, and the isolation vocabulary.

Pure data: no processes, no I/O. ``SandboxConfig`` validates itself (a bad config is a programmer error and
raises); ``IsolationReport`` says which layers hold on this machine and how that compares to the floor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

MiB = 1 << 20

# Every isolation layer, strongest-first in spirit. "bwrap": user/pid/net/ipc/uts/mount/cgroup namespaces with a
# minimal read-only filesystem view and size-capped tmpfs, made by bubblewrap or by the fork server's same steps; "uid": a dedicated unprivileged uid per worker (host is
# root); "rlimits": address space, CPU, file size, open files, no core; "no_new_privs": also no ptrace
# attach or core dumps; "landlock": filesystem allowlist, no TCP, signals and abstract sockets scoped;
# "seccomp": no exec/fork/threads/sockets/ptrace/mount/...; "cgroup": memory, pids and CPU limits.
LAYERS = ("bwrap", "uid", "rlimits", "no_new_privs", "landlock", "seccomp", "cgroup")
MODES = ("auto", "bwrap", "plain", "unsafe-dev")


class IsolationError(RuntimeError):
    """The sandbox cannot run at the configured isolation floor on this machine (or failed to start)."""


@dataclass(frozen=True)
class SandboxConfig:
    # Wall time per cell, llm() excluded. Soft: TimeoutError inside the cell, variables kept. Hard: the worker
    # is killed and restarted, variables lost.
    soft_timeout_s: float = 10.0
    hard_timeout_s: float = 15.0
    memory_mb: int = 2048  # address space for the model's own data; 3x the document's size is added on top
    cpu_time_s: int = 600  # CPU seconds per worker (RLIMIT_CPU): TimeoutError, then the worker is killed
    disk_mb: int = 64  # size of the /work and /tmp tmpfs (bwrap) and the largest file (RLIMIT_FSIZE)
    max_open_files: int = 64  # RLIMIT_NOFILE
    cpu_cores: float = 1.0  # cgroup CPU quota per worker, in cores (0: no quota)
    max_output_chars: int = 20_000  # stdout+stderr kept per cell; the rest is counted and marked
    max_answer_chars: int = 20_000  # the answer's JSON (or str()) is cut to this
    max_llm_calls: int = 200  # llm() calls per episode (an llm_batch item is one call)
    max_llm_chars: int = 400_000  # prompt + chunk characters per call
    max_batch: int = 256  # items per llm_batch()
    llm_timeout_s: float = 600.0  # how long the host waits for the handler on one request
    max_frame_bytes: int = 16 * MiB  # a larger frame from the worker is a protocol violation (restart)
    start_timeout_s: float = 30.0  # from spawn to "ready"
    isolation: str = "auto"  # "auto" (bwrap if it works, else plain) | "bwrap" | "plain" | "unsafe-dev"
    # Layers required to run; "a|b" means either. Ignored (with a loud warning) in "unsafe-dev".
    min_isolation: tuple[str, ...] = ("rlimits", "no_new_privs", "seccomp", "landlock|bwrap")
    python: str = "/usr/bin/python3"  # the worker's interpreter: must be readable by the sandbox uid
    uid_base: int = 2_100_000_000  # per-worker uids are uid_base + [0, 65536) when the host runs as root
    # As root in bwrap mode: fork workers from a fork server (same layers, no exec per worker); False: exec each
    fork_server: bool = True
    runtime_dir: str | None = None  # where worker files, cgroups tags and work dirs go (default: a temp dir)

    def __post_init__(self) -> None:
        if not 0 < self.soft_timeout_s < self.hard_timeout_s:
            raise ValueError("need 0 < soft_timeout_s < hard_timeout_s")
        if self.isolation not in MODES:
            raise ValueError(f"isolation must be one of {MODES}, got {self.isolation!r}")
        for item in self.min_isolation:
            unknown = set(item.split("|")) - set(LAYERS)
            if unknown:
                raise ValueError(f"unknown isolation layer(s) {sorted(unknown)}; known: {LAYERS}")
        for name in ("memory_mb", "cpu_time_s", "disk_mb", "max_output_chars", "max_answer_chars",
                     "max_llm_chars", "max_batch", "max_frame_bytes", "max_open_files"):  # fmt: skip
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_llm_calls < 0 or self.cpu_cores < 0:
            raise ValueError("max_llm_calls and cpu_cores must be >= 0")


@dataclass(frozen=True)
class LLMRequest:
    prompt: str
    chunk: str


# Answers one episode's batch of requests, in order. llm() sends a batch of one; llm_batch() sends all its
# items at once so the handler can batch generation.
LLMHandler = Callable[[list[LLMRequest]], Awaitable[list[str]]]


@dataclass(frozen=True)
class CellResult:
    stdout: str  # stdout+stderr, control characters escaped, cut with a "[... N chars truncated]" marker
    error: str | None  # the traceback (model frames only) or the timeout/restart message; None on success
    truncated_chars: int  # output characters dropped
    answer_ready: bool  # answer["ready"] was set (or FINAL() called) by the end of this cell
    answer: Any  # answer["content"]: JSON-able values as is, anything else str()-ed, size-capped
    elapsed_s: float  # wall time of the cell, llm() time excluded
    timed_out: bool  # the soft or the hard limit was hit
    restarted: bool  # the worker was replaced: every variable is gone (ctx and the helpers are back)
    llm_calls: int  # llm() calls made by this cell
    llm_chars: int  # characters sent to the sub-LM by this cell


@dataclass(frozen=True)
class SandboxStats:
    llm_calls: int
    llm_chars: int
    cells: int
    restarts: int


@dataclass(frozen=True)
class IsolationReport:
    """What a worker started in this mode actually got; ``missing`` maps each absent layer to the reason."""

    mode: str
    layers: tuple[str, ...]
    missing: dict[str, str] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def level(self) -> str:
        if self.mode == "unsafe-dev":
            return "unsafe"
        return "full" if set(LAYERS) <= set(self.layers) else "partial"

    def unmet(self, floor: tuple[str, ...]) -> list[str]:
        """Items of the floor that no applied layer satisfies."""
        return [item for item in floor if not set(item.split("|")) & set(self.layers)]

    def describe(self) -> str:
        text = f"sandbox isolation: {self.level} ({self.mode}): {'+'.join(self.layers) or 'none'}"
        if self.missing:
            text += "; missing: " + "; ".join(f"{k} ({v})" for k, v in self.missing.items())
        return text
