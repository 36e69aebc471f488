"""Ranks die with their launcher.

``accelerate launch`` (torchrun's elastic agent) starts each rank in a session of its own. When a rank dies,
the agent stops the others (SIGTERM, then SIGKILL) and exits non-zero; each rank's sandbox workers die with
it (bwrap ``--die-with-parent`` / ``PR_SET_PDEATHSIG``). But when the agent itself is killed outright
(SIGKILL, an OOM kill, a lease's hard stop), nothing tells the ranks: they were seen training on as orphans,
with their sandboxes, holding their GPUs. `die_with_launcher` asks the kernel to SIGKILL a rank when its
parent — the agent — dies; its sandboxes then follow it as they follow any dead host.

Only processes started by torchrun (``TORCHELASTIC_RUN_ID`` set) are touched. This module starts nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def under_launcher() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def die_with_launcher() -> bool:
    """Under torchrun on Linux: SIGKILL this process when its parent (the agent) dies. Returns whether set.

    The agent starts its workers from its main thread, which lives as long as the agent, so the signal
    (sent when the parent *thread* ends) means the agent is gone. Exits at once if it is already gone."""
    if not under_launcher() or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
    if os.getppid() == 1:  # the agent died before the prctl: init (or a subreaper) adopted us already
        os._exit(1)
    return True
