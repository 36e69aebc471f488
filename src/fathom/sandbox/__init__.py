"""The sandboxed Python REPL an RLM episode runs in: one jailed, persistent worker process per episode.

    async with SandboxPool(SandboxConfig(), size=8) as pool:
        sandbox = await pool.start("doc.txt", llm=handler)   # or: await Sandbox.start("doc.txt", config, llm)
        result = await sandbox.execute("print(len(ctx))")    # CellResult
        await sandbox.close()

Layers (recorded per worker in ``Sandbox.layers``): bubblewrap namespaces, a dedicated uid, rlimits,
no_new_privs, Landlock, seccomp, cgroups. ``SandboxConfig.isolation`` picks the mode: "auto" (bwrap when it
works here, else "plain"), "bwrap", "plain" (every in-worker layer, no namespaces), or "unsafe-dev" (rlimits
only, for machines without these kernel features: model code runs as you, with a loud warning; never train
with it). Below ``min_isolation`` a sandbox refuses to start. ``python -m fathom.sandbox`` prints what holds.
Design, threat model and measurements: shared/design/sandbox.md; figures in bench/RESULTS.md.
"""

from fathom.sandbox.config import (
    LAYERS,
    CellResult,
    IsolationError,
    IsolationReport,
    LLMHandler,
    LLMRequest,
    SandboxConfig,
    SandboxStats,
)
from fathom.sandbox.host import Sandbox, SandboxClosed
from fathom.sandbox.pool import SandboxPool
from fathom.sandbox.selftest import self_test

__all__ = [
    "LAYERS",
    "CellResult",
    "IsolationError",
    "IsolationReport",
    "LLMHandler",
    "LLMRequest",
    "Sandbox",
    "SandboxClosed",
    "SandboxConfig",
    "SandboxPool",
    "SandboxStats",
    "self_test",
]
