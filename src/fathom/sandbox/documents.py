"""The document a worker reads as ``ctx``: a read-only file descriptor, and a pool's cache of in-memory ones.

``open_ctx`` gives a Sandbox its document as an fd: the file at a path (opened, never read here), or a
text written once into a sealed memfd (no write, grow, shrink or new seals: the worker that receives it
cannot edit the document). ``DocumentCache`` keeps those memfds for a pool, so a reset onto a document
it has sealed before costs one ``open`` instead of encoding and copying megabytes: each episode gets its
own open file description of the cached memfd (not a dup, so no file offset is shared between
episodes). Only the text itself is shared, and only between episodes given that same text. It does not
decide what the document is, and it never reads a file's contents.
"""

from __future__ import annotations

import collections
import fcntl
import os
import stat

SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL


def sealed_memfd(text: str) -> tuple[int, int]:
    """(fd, size in bytes) of a new memfd holding ``text`` as UTF-8, sealed against every change."""
    data = text.encode("utf-8", "surrogatepass")
    fd = os.memfd_create("fathom-ctx", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)  # the worker gets this fd: it must not edit the document
    except BaseException:
        os.close(fd)
        raise
    return fd, len(data)


def open_ctx(ctx_path: str | os.PathLike | None, ctx_text: str | None) -> tuple[int, int]:
    """(read-only fd, size in bytes) of the document: the file at ctx_path, or ctx_text in a sealed memfd."""
    if (ctx_path is None) == (ctx_text is None):
        raise ValueError("give exactly one of ctx_path and ctx_text")
    if ctx_text is not None:
        return sealed_memfd(ctx_text)
    fd = os.open(ctx_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # NONBLOCK: a FIFO must not hang us
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise ValueError(f"ctx_path must be a regular file: {ctx_path}")
    return fd, st.st_size


class DocumentCache:
    """Sealed memfds of recent texts, least recently used dropped first once they pass ``max_bytes``.

    Keyed by the text: a caller that passes the same ``str`` object each time (a task's document) pays
    its hash once. ``open`` returns an fd the caller owns and closes; the cache keeps its own.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._fds: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._fds)

    def open(self, ctx_path: str | os.PathLike | None, ctx_text: str | None) -> tuple[int, int]:
        """What ``open_ctx`` returns, from the cache when ``ctx_text`` was sealed before."""
        if ctx_text is None or ctx_path is not None:
            return open_ctx(ctx_path, ctx_text)
        entry = self._fds.get(ctx_text)
        if entry is None:
            entry = sealed_memfd(ctx_text)
            if entry[1] > self.max_bytes:  # larger than the whole cache: used once, not kept
                return entry
            self._fds[ctx_text] = entry
            self.bytes += entry[1]
            while self.bytes > self.max_bytes:
                _, (fd, size) = self._fds.popitem(last=False)
                os.close(fd)
                self.bytes -= size
        else:
            self._fds.move_to_end(ctx_text)
        fd, size = entry
        # A new open file description of the same sealed memfd: the episode's own offset and flags.
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC), size

    def close(self) -> None:
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()
        self.bytes = 0
