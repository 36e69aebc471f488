"""DocumentCache: a pool's sealed memfds of recent texts. Each episode gets its own open file description of
the same sealed inode, the cache stays under its byte budget (least recently used out first), and a pool
that reuses a cached document still gives every worker the right ``ctx``."""

from __future__ import annotations

import asyncio
import fcntl
import os

import pytest
from conftest import config

from fathom.sandbox import SandboxPool
from fathom.sandbox.documents import SEALS, DocumentCache


def read_all(fd: int) -> bytes:
    return os.pread(fd, 1 << 20, 0)


def test_a_cached_text_is_one_sealed_inode_with_an_offset_per_episode() -> None:
    cache = DocumentCache(1 << 20)
    text = "héllo wörld"
    try:
        (a, size_a), (b, size_b) = cache.open(None, text), cache.open(None, text)
        try:
            assert size_a == size_b == len(text.encode())
            assert read_all(a) == read_all(b) == text.encode()
            assert os.fstat(a).st_ino == os.fstat(b).st_ino and len(cache) == 1
            os.lseek(a, 3, os.SEEK_SET)  # a separate open file description: b's offset does not move
            assert os.lseek(b, 0, os.SEEK_CUR) == 0
            assert fcntl.fcntl(a, fcntl.F_GET_SEALS) & SEALS == SEALS
            with pytest.raises(OSError):
                os.write(a, b"x")  # opened read-only, and the inode is sealed against writes
            assert os.fstat(a).st_size == size_a
        finally:
            os.close(a)
            os.close(b)
    finally:
        cache.close()
    assert len(cache) == 0 and cache.bytes == 0


def test_the_least_recently_used_text_leaves_first_and_a_huge_one_is_not_kept() -> None:
    cache = DocumentCache(10)
    try:
        fds = [cache.open(None, t)[0] for t in ("aaaa", "bbbb", "aaaa", "cccc")]  # "aaaa" used again
        assert len(cache) == 2 and cache.bytes == 8  # "bbbb" went: it was the least recently used
        inode_a = os.fstat(fds[0]).st_ino
        again = cache.open(None, "aaaa")[0]
        fresh_b = cache.open(None, "bbbb")[0]  # sealed anew; "cccc" is now the oldest and leaves
        big, size = cache.open(None, "z" * 11)
        assert os.fstat(again).st_ino == inode_a and os.fstat(fresh_b).st_ino != os.fstat(fds[1]).st_ino
        assert size == 11 and read_all(big) == b"z" * 11 and len(cache) == 2 and cache.bytes == 8
        assert read_all(fds[1]) == b"bbbb"  # an fd handed out earlier outlives its cache entry
        for fd in (*fds, again, fresh_b, big):
            os.close(fd)
    finally:
        cache.close()


def test_no_cache_and_files_pass_through(tmp_path) -> None:
    cache = DocumentCache(0)
    fd, size = cache.open(None, "kept nowhere")
    assert read_all(fd) == b"kept nowhere" and size == 12 and len(cache) == 0
    os.close(fd)
    doc = tmp_path / "doc.txt"
    doc.write_text("on disk")
    fd, size = cache.open(doc, None)
    assert read_all(fd) == b"on disk" and size == 7 and len(cache) == 0
    os.close(fd)
    with pytest.raises(ValueError, match="exactly one"):
        cache.open(doc, "both")
    with pytest.raises(ValueError, match=">= 0"):
        DocumentCache(-1)


def test_a_pool_serves_a_cached_document_to_every_episode() -> None:
    text = "the document " * 1000

    async def go():
        async with SandboxPool(config(), size=1, handle_signals=False) as pool:
            results = []
            for code in ("print(len(ctx), ctx[:12])", "print(ctx.count('document'))"):
                sandbox = await pool.start(None, ctx_text=text)
                results.append(await sandbox.execute(code))
                await sandbox.close()
            return results, len(pool._documents)

    (first, second), cached = asyncio.run(go())
    assert first.stdout == f"{len(text)} the document\n" and second.stdout == "1000\n"
    assert cached == 1
