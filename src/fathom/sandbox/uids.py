"""Dedicated uids for sandbox workers, unique across every host process on the machine.

Workers of one host process take uids from blocks of ``UID_BLOCK`` that the process holds an ``flock`` on, so
two trainers (or eight ranks of one) never hand out the same uid, and a block frees itself when its holder
dies. Per-worker uids give per-episode process accounting and make cross-episode signals and ptrace fail even
without namespaces. This module only allocates numbers; ``launch.py`` drops to them with setpriv.
"""

from __future__ import annotations

import fcntl
import os

from fathom.sandbox.config import IsolationError

UID_BLOCK, UID_BLOCKS = 16, 4096  # small blocks: every standalone Sandbox claims its own


class UidSlots:
    """Dedicated uids, claimed in blocks under flock so that host processes on one machine never share one."""

    def __init__(self, base: int, lock_dir: str) -> None:
        self.base, self.lock_dir = base, lock_dir
        self.blocks: dict[int, int] = {}  # block index -> fd holding its lock
        self.free: list[int] = []

    def claim(self) -> int:
        if not self.free:
            self._claim_block()
        return self.free.pop()

    def release(self, uid: int) -> None:
        self.free.append(uid)

    def _claim_block(self) -> None:
        start = os.getpid() % UID_BLOCKS  # spreads processes over the range; the lock is what guarantees it
        for i in range(UID_BLOCKS):
            block = (start + i) % UID_BLOCKS
            if block in self.blocks:
                continue
            fd = os.open(
                os.path.join(self.lock_dir, f"uids-{block}.lock"),
                os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                0o600,
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.blocks[block] = fd
            first = self.base + block * UID_BLOCK
            self.free.extend(range(first + UID_BLOCK - 1, first - 1, -1))
            return
        raise IsolationError("every sandbox uid block is in use on this machine")

    def close(self) -> None:
        for fd in self.blocks.values():
            os.close(fd)
        self.blocks.clear()
        self.free.clear()
