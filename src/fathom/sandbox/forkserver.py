"""Host end of the fork server (``zygote.py``): start it, ask it for worker trees, hold their pidfds.

``ForkServer`` starts one zygote per launcher and sends it one request per worker over a SOCK_SEQPACKET
socket: a JSON header (the worker's uid, config and tmpfs size) plus the worker's three fds; the reply
carries the pidfd of the tree (one process: the worker, pid 1 of its namespaces). ``ForkedTree`` is the
host's handle on that tree, with the part of ``subprocess.Popen``'s surface the launcher uses (``pid``,
``poll``, ``kill``). It does not wait for "ready", check layers or attach cgroups (``launch.py`` does),
and never sees a document.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess


class ForkServerError(Exception):
    """The fork server could not start, died, or refused a request; the launcher falls back to exec."""


class ForkedTree:
    """A worker tree forked by the zygote: its process's pid and pidfd (signals never reach a reused pid)."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid, self.pidfd = pid, pidfd
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """None while the tree's process runs; then 0 (its exit code is the zygote's to read: it reaps it)."""
        if self.returncode is None and self.pidfd >= 0:
            poller = select.poll()  # not select(): pidfds go past FD_SETSIZE with hundreds of episodes
            poller.register(self.pidfd, select.POLLIN)
            if poller.poll(0):
                self.returncode = 0
        return self.returncode

    async def wait(self, timeout: float) -> None:
        """Until the tree's process has exited, or ``timeout`` seconds."""
        if self.poll() is not None:
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        loop.add_reader(self.pidfd, _wake, waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            pass
        finally:
            loop.remove_reader(self.pidfd)
        self.poll()

    def kill(self) -> None:
        if self.pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
            self.returncode = 0 if self.returncode is None else self.returncode


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class ForkServer:
    """One zygote process and the socket to it; requests are answered one at a time, in order."""

    def __init__(self, popen: subprocess.Popen, sock: socket.socket) -> None:
        self.popen, self.sock = popen, sock
        self.lock = asyncio.Lock()

    @classmethod
    async def start(cls, python: str, script: str, config: dict, env: dict, timeout: float) -> ForkServer:
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {**config, "fd": child.fileno(), "host_pid": os.getpid()}
        try:
            popen = subprocess.Popen([python, "-I", "-S", "-B", script, json.dumps(config)], env=env, cwd="/",
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     pass_fds=(child.fileno(),), start_new_session=True)  # fmt: skip
        except OSError as e:
            host.close()
            raise ForkServerError(f"cannot start the fork server: {e}") from None
        finally:
            child.close()
        host.setblocking(False)
        server = cls(popen, host)
        try:
            hello = json.loads((await server._recv(timeout))[0])
        except (ForkServerError, ValueError) as e:
            server.close()
            raise ForkServerError(f"the fork server failed to start: {e}") from None
        if not hello.get("ready"):
            server.close()
            raise ForkServerError(f"the fork server failed to start: {str(hello.get('error'))[-2000:]}")
        return server

    async def _recv(self, timeout: float) -> tuple[bytes, list[int]]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(self.sock, 1 << 16, 1)
            except BlockingIOError:
                fd = self.sock.fileno()  # the number it was watched by: close() may run while we wait
                waiter = loop.create_future()
                loop.add_reader(fd, _wake, waiter)
                try:
                    await asyncio.wait_for(waiter, max(deadline - loop.time(), 0.0))
                except TimeoutError:
                    raise ForkServerError(f"the fork server did not answer within {timeout:g} s") from None
                finally:
                    loop.remove_reader(fd)
                continue  # a closed socket fails the next recv_fds: ForkServerError
            except OSError as e:
                raise ForkServerError(f"the fork server's socket failed: {e}") from None
            if not msg:
                for fd in fds:
                    os.close(fd)
                raise ForkServerError("the fork server exited")
            return msg, fds

    async def fork(self, request: dict, fds: list[int], timeout: float) -> ForkedTree:
        """A new worker tree for ``request`` holding ``fds`` (the caller keeps and closes its own copies)."""
        async with self.lock:
            try:
                socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
            except OSError as e:  # BlockingIOError included: one small message never fills the socket
                raise ForkServerError(f"cannot reach the fork server: {e}") from None
            try:
                msg, pidfds = await self._recv(timeout)
            except BaseException:
                # cancelled or timed out with a reply still owed: the next request would read this one's
                # reply (another tree's pidfd), so this server answers nothing more
                self.sock.close()
                raise
        reply = json.loads(msg)
        if "pid" not in reply or len(pidfds) != 1:
            for fd in pidfds:
                os.close(fd)
            raise ForkServerError(f"the fork server refused: {reply.get('error')}")
        return ForkedTree(int(reply["pid"]), pidfds[0])

    def close(self) -> None:
        """Kill the zygote (its trees die with it: each has PR_SET_PDEATHSIG) and reap it."""
        self.sock.close()
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
