"""A worker channel's pipe fds are closed exactly once, under asyncio's loop and under uvloop (the server's).

uvloop gives the fd to libuv, which closes it, and then closes the transport's file object as well: if that
object owned the fd, the second close(fd) took whatever file another thread had opened with the number in
between (other workers' pidfds and pipes, under the server's load)."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest
import uvloop

from fathom.sandbox.channel import Channel

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def alive(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def run(loop_name: str, coro_fn):
    loop = LOOPS[loop_name]()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


@pytest.mark.parametrize("loop_name", LOOPS)
def test_a_closed_channel_leaves_no_fd_open(loop_name: str) -> None:
    async def go():
        h2w_r, h2w_w = os.pipe2(os.O_CLOEXEC)
        w2h_r, w2h_w = os.pipe2(os.O_CLOEXEC)
        channel = await Channel.open(w2h_r, h2w_w, 1 << 20)
        channel.close()  # the worker's ends stay open: the channel itself must close its own fds
        for _ in range(20):
            await asyncio.sleep(0)
        left = (alive(w2h_r), alive(h2w_w))
        for fd in (h2w_r, w2h_w):
            os.close(fd)
        return left

    assert run(loop_name, go) == (False, False)


def test_under_uvloop_the_transports_file_objects_do_not_own_the_fds() -> None:
    async def go():
        h2w_r, h2w_w = os.pipe2(os.O_CLOEXEC)
        w2h_r, w2h_w = os.pipe2(os.O_CLOEXEC)
        channel = await Channel.open(w2h_r, h2w_w, 1 << 20)
        pipes = [t.get_extra_info("pipe") for t in (channel._rtransport, channel._wtransport)]
        channel.close()
        for fd in (h2w_r, w2h_w):
            os.close(fd)
        return [p.closefd for p in pipes]

    assert run("uvloop", go) == [False, False]


@pytest.mark.slow
def test_no_stray_close_reaches_another_threads_files_under_uvloop() -> None:
    """40,000 channels opened and closed while a thread opens and closes files: before the fix about 1 in
    2,000 of them closed one of that thread's files."""
    stop, stray = threading.Event(), []

    def churn() -> None:
        while not stop.is_set():
            fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(4)]
            for fd in fds:
                if not alive(fd):
                    stray.append(fd)
                    continue
                os.close(fd)

    async def go():
        for _ in range(40_000):
            h2w_r, h2w_w = os.pipe2(os.O_CLOEXEC)
            w2h_r, w2h_w = os.pipe2(os.O_CLOEXEC)
            channel = await Channel.open(w2h_r, h2w_w, 1 << 20)
            os.close(w2h_w)  # the worker goes: EOF closes the read side from the loop
            await asyncio.sleep(0)
            channel.close()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            os.close(h2w_r)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        run("uvloop", go)
    finally:
        stop.set()
        thread.join()
    assert stray == []
