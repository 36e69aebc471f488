"""Host-side helpers about processes and leftovers, read from /proc and the runtime directory.

The launcher uses them to find a worker's process tree, to tell whether a pid still runs, to raise this
process's open-file limit and to sweep runtime directories of dead hosts. Nothing here starts or signals
a process.
"""

from __future__ import annotations

import os
import resource
import shutil
import stat

from fathom.sandbox.cgroup import PREFIX


def raise_open_file_limit(wanted: int = 65536) -> None:
    """Each live episode holds 4-6 fds on the host (two pipes, the document, pidfds, a uid lock for
    standalone sandboxes); the usual soft limit of 1024 is too low for hundreds of episodes. Only ever raises it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def world_traversable(path: str) -> bool:
    """Every directory from / to path is searchable by any uid (so a dropped uid can reach what is in it)."""
    path = os.path.realpath(path)
    while True:
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


def process_tree(pid: int) -> list[int]:
    """pid and its descendants (the worker does not fork, so after "ready" this is stable)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def parent_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def sweep_runtime(base: str) -> None:
    """Delete runtime directories whose owning host process is gone (crash, SIGKILL)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        try:
            os.kill(int(name[len(PREFIX) :].split("-")[0]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
        except (ValueError, PermissionError):
            pass
