"""Spawning jailed workers: command line, identity, filesystem view, cgroup, readiness and teardown.

A ``Launcher`` owns what workers share: a world-readable runtime directory with copies of the worker files
(so a dropped uid can read them wherever this package is installed), a block of dedicated uids, and a
cgroup root. ``spawn`` starts one worker, waits for its ``ready`` frame, records which layers applied and
checks them against the configured floor; ``kill`` tears one down and waits until its uid is free again.
It does not load documents or run cells (``host.py`` does), and it never reads anything from a worker but
frames through ``Channel``.

Two ways to start one. As root in bwrap mode (and ``SandboxConfig.fork_server``), a fork server
(``zygote.py``, one per launcher) forks the worker's tree and takes bwrap's steps itself, without an exec:
a start then costs a few forks instead of three execs and the worker's imports. Otherwise, and whenever
the fork server cannot start, the exec chain: ``setpriv`` (drop to uid_base+k, no groups, no caps) ->
``bwrap`` (unprivileged, user namespace, --die-with-parent) -> ``python3 -I -S -B worker.py``.
``subprocess`` can then use vfork, so a multi-GB trainer does not pay a fork per worker, and no
``preexec_fn`` runs in a threaded host. Either way the worker applies the same in-worker layers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

from fathom.sandbox.cgroup import PREFIX, Cgroup, CgroupRoot
from fathom.sandbox.channel import Channel
from fathom.sandbox.config import IsolationError, IsolationReport, MiB, SandboxConfig
from fathom.sandbox.forkserver import ForkedTree, ForkServer, ForkServerError
from fathom.sandbox.proctree import (
    parent_of,
    pid_alive,
    process_tree,
    raise_open_file_limit,
    sweep_runtime,
    world_traversable,
)
from fathom.sandbox.protocol import ProtocolError
from fathom.sandbox.uids import UidSlots

log = logging.getLogger("fathom.sandbox")

WORKER_FILES = ("worker.py", "protocol.py", "lockdown.py", "zygote.py")
WORKER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "MALLOC_ARENA_MAX": "2"}
IN_WORKER_LAYERS = ("rlimits", "no_new_privs", "landlock", "seccomp")
STOP_DELAY_S = 0.005  # between a cell's result and the SIGSTOP that ends its CPU (see Worker.pause)


@dataclass
class Worker:
    """One started worker process tree, ready for a document."""

    # the tree's top: setpriv/bwrap's monitor, or the forked worker itself
    proc: subprocess.Popen | ForkedTree
    channel: Channel
    ctl: socket.socket  # host end of the socket that passes the document's fd
    report: IsolationReport
    uid: int | None
    seq: int = 0  # spawn counter, names the cgroup when there is no uid
    # host pids of the tree: bwrap's monitor, init and python; a forked tree is python alone
    pids: list[int] = field(default_factory=list)
    cgroup: Cgroup | None = None
    workdir: str | None = None  # a per-worker directory to delete (unsafe-dev only)
    pidfd: int | None = None  # the interpreter's pidfd: signals reach it even after its pid is reused
    _stopping: asyncio.Handle | None = field(default=None, repr=False)  # a pause() not yet carried out

    def pause(self) -> None:
        """SIGSTOP the interpreter between cells: whatever the model left running gets no CPU.

        The stop goes STOP_DELAY_S after the cell, unless the next cell comes first and cancels it: a client
        that steps back to back then costs no stop/continue pair (two signals and two wake-ups of the worker,
        3-9% of one client's steps/s). Leftovers of a cell get at most that long per cell, as they may
        between the result and any signal."""
        if self._stopping is None:
            self._stopping = asyncio.get_running_loop().call_later(STOP_DELAY_S, self._stop)

    def resume(self) -> None:
        if not self.cancel_stop():  # a stop never sent leaves the interpreter running: nothing to continue
            self._signal(signal.SIGCONT)

    def cancel_stop(self) -> bool:
        """Drop a pause() not yet carried out; whether there was one."""
        if self._stopping is None:
            return False
        self._stopping.cancel()
        self._stopping = None
        return True

    def _stop(self) -> None:
        self._stopping = None
        self._signal(signal.SIGSTOP)

    def _signal(self, sig: int) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):  # already dead: the channel reports it
                signal.pidfd_send_signal(self.pidfd, sig)


class Launcher:
    """Starts and stops workers for one SandboxPool (or one standalone Sandbox)."""

    def __init__(self, config: SandboxConfig, workers: str = "many") -> None:
        """``workers="one"`` (a standalone Sandbox): exec each worker, as a fork server would start only once."""
        self.config = config
        raise_open_file_limit()
        self.is_root = os.geteuid() == 0
        self.setpriv = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
        self.bwrap = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
        self.mode = self._resolve_mode()
        self.warned = False
        base = config.runtime_dir or tempfile.gettempdir()
        if not world_traversable(base):
            base = "/tmp"
        sweep_runtime(base)
        self.runtime = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
        os.chmod(self.runtime, 0o755)
        self.worker_dir = os.path.join(self.runtime, "worker")
        os.mkdir(self.worker_dir, 0o755)
        here = os.path.dirname(os.path.abspath(__file__))
        for name in WORKER_FILES:
            shutil.copyfile(os.path.join(here, name), os.path.join(self.worker_dir, name))
            os.chmod(os.path.join(self.worker_dir, name), 0o644)
        self.empty_dir = os.path.join(self.runtime, "empty")
        os.mkdir(self.empty_dir, 0o555)
        self.uids: UidSlots | None = None
        self.uid_reason = "the host is not root: workers run as the invoking user"
        if self.mode == "unsafe-dev":
            self.uid_reason = "not used in unsafe-dev mode"
        elif self.is_root:
            self.uid_reason = "setpriv (util-linux) not found"
            if self.setpriv:
                lock_dir = "/run/fathom-sandbox" if os.access("/run", os.W_OK) else self.runtime
                os.makedirs(lock_dir, mode=0o700, exist_ok=True)
                self.uids = UidSlots(config.uid_base, lock_dir)
        self.cgroups, self.cgroup_reason = (None, "not used in unsafe-dev mode")
        if self.mode != "unsafe-dev":
            self.cgroups, self.cgroup_reason = CgroupRoot.find(os.path.basename(self.runtime)[len(PREFIX) :])
        self.spawned = 0
        self.fork_server: ForkServer | None = None
        self.fork_lock = asyncio.Lock()
        self.fork_reason = "the fork server is used as root in bwrap mode"
        self.use_fork = config.fork_server and self.mode == "bwrap" and self.uids is not None
        if workers == "one":
            self.use_fork, self.fork_reason = (
                False,
                "a standalone sandbox: one exec costs less than a fork server",
            )

    def _resolve_mode(self) -> str:
        mode = self.config.isolation
        usable = bool(self.bwrap) and (self.setpriv is not None or not self.is_root)
        if mode == "bwrap" and not usable:
            raise IsolationError("isolation='bwrap' but bubblewrap (or setpriv, as root) is not installed")
        if mode == "auto":
            return "bwrap" if usable else "plain"
        return mode

    # ---- command line ---------------------------------------------------------------------------------
    def _argv(self, uid: int | None, worker_cfg: dict) -> list[str]:
        cfg, argv = self.config, []
        if uid is not None:
            assert self.setpriv is not None
            argv = [self.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                    "--bounding-set=-all", "--no-new-privs"]  # fmt: skip
        worker = os.path.join(self.worker_dir, "worker.py")
        if self.mode == "bwrap":
            assert self.bwrap is not None
            size = str(cfg.disk_mb * MiB)
            argv += [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                     "--new-session", "--cap-drop", "ALL", "--hostname", "sbx", "--dev", "/dev",
                     "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/work", "--chdir", "/work"]  # fmt: skip
            view = self._view()
            for top in view["dirs"]:
                argv += ["--ro-bind", top, top]
            for top, dest in view["symlinks"].items():
                argv += ["--symlink", dest, top]
            argv += ["--ro-bind", self.worker_dir, "/sbx"]
            worker = "/sbx/worker.py"
        return [*argv, cfg.python, "-I", "-S", "-B", worker, json.dumps(worker_cfg)]

    def _view(self) -> dict:
        """The host paths a bwrap-mode worker sees, read-only: {"dirs": [...], "symlinks": {path: target}}."""
        dirs, links = ["/usr"], {}
        for top in ("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin"):
            if os.path.islink(top):
                links[top] = os.readlink(top)
            elif os.path.isdir(top):
                dirs.append(top)
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(self.config.python)))
        if not prefix.startswith("/usr"):
            dirs.append(prefix)
        return {"dirs": dirs, "symlinks": links}

    def _worker_cfg(self, fds: tuple[int, int, int], workdir: str) -> dict:
        cfg = self.config
        bwrap, unsafe = self.mode == "bwrap", self.mode == "unsafe-dev"
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(cfg.python)))
        return {
            "fd_in": fds[0], "fd_out": fds[1], "fd_ctl": fds[2],
            "ppid": 0 if bwrap else os.getpid(),  # bwrap's --die-with-parent covers the bwrap chain
            "workdir": "/work" if bwrap else workdir,
            "layers": ["rlimits"] if unsafe else list(IN_WORKER_LAYERS),
            "rlimits": {"cpu": cfg.cpu_time_s, "fsize": cfg.disk_mb * MiB, "nofile": cfg.max_open_files,
                        "core": 0, "nproc": 0, "msgqueue": 0, "memlock": 0},
            "read_dirs": ["/usr/lib", "/usr/lib64", "/lib", "/lib64", os.path.join(prefix, "lib"),
                          "/sbx" if bwrap else self.worker_dir, "/work" if bwrap else workdir],
            "write_dirs": ["/work", "/tmp"] if bwrap else [],
            "memory_bytes": cfg.memory_mb * MiB,
            "soft_timeout_s": cfg.soft_timeout_s,
            "max_output_chars": cfg.max_output_chars, "max_answer_chars": cfg.max_answer_chars,
            "max_llm_chars": cfg.max_llm_chars, "max_batch": cfg.max_batch, "max_frame": cfg.max_frame_bytes,
        }  # fmt: skip

    def memory_limit(self, ctx_bytes: int) -> int:
        """The cgroup limit: the rlimit budget plus headroom for the interpreter and the tmpfs pages."""
        return (self.config.memory_mb + 512 + 2 * self.config.disk_mb) * MiB + 3 * ctx_bytes

    # ---- spawn / kill ---------------------------------------------------------------------------------
    async def spawn(self) -> Worker:
        """A started, ready, floor-checked worker. Raises IsolationError when that is impossible."""
        if self.use_fork:
            try:
                return await self._spawn(forked=True)
            except (_EarlyExit, ForkServerError) as e:  # the exec chain gives the same layers, only slower
                if self.use_fork:
                    log.warning("the sandbox fork server failed, starting workers by exec from now on: %s", e)
                    self.use_fork, self.fork_reason = False, f"the fork server failed: {e}"
                if self.fork_server is not None:
                    self.fork_server.close()
                    self.fork_server = None
        try:
            return await self._spawn()
        except _EarlyExit as e:
            if self.config.isolation != "auto" or self.mode != "bwrap":
                raise IsolationError(f"the sandbox worker failed to start ({self.mode}): {e}") from None
            log.warning("bubblewrap failed here, falling back to plain isolation: %s", e)
            self.mode = "plain"
            return await self._spawn()

    async def _start(self, uid: int | None, fds: tuple[int, int, int], workdir: str, forked: bool):
        """The worker's process tree, holding ``fds`` (the caller closes its own copies)."""
        cfg = self._worker_cfg(fds, workdir)
        if forked:
            async with self.fork_lock:  # concurrent first spawns must not start two fork servers
                if not self.use_fork:
                    raise ForkServerError(self.fork_reason)
                if self.fork_server is None:
                    zcfg = {"root": os.path.join(self.runtime, "root"), "worker_dir": self.worker_dir,
                            **self._view()}  # fmt: skip
                    os.makedirs(zcfg["root"], 0o755, exist_ok=True)
                    script = os.path.join(self.worker_dir, "zygote.py")
                    self.fork_server = await ForkServer.start(
                        self.config.python, script, zcfg, WORKER_ENV, self.config.start_timeout_s
                    )
                server = self.fork_server
            cfg["ppid"] = 0  # each process of the tree dies with its parent (PR_SET_PDEATHSIG)
            request = {"uid": uid, "cfg": cfg, "disk_bytes": self.config.disk_mb * MiB}
            return await server.fork(request, list(fds), self.config.start_timeout_s), None
        argv = self._argv(uid, cfg)
        try:
            popen = subprocess.Popen(argv, env=WORKER_ENV, cwd="/", stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=fds,
                                     start_new_session=True)  # fmt: skip
        except OSError as e:
            raise IsolationError(f"cannot start the sandbox worker: {e}") from None
        return popen, argv

    async def _spawn(self, forked: bool = False) -> Worker:
        uid = self.uids.claim() if self.uids is not None else None
        self.spawned += 1
        seq, workdir = self.spawned, self.empty_dir
        if self.mode == "unsafe-dev":
            workdir = os.path.join(self.runtime, f"dev-{seq}")
            os.mkdir(workdir, 0o700)
        h2w_r, h2w_w = os.pipe2(os.O_CLOEXEC)
        w2h_r, w2h_w = os.pipe2(os.O_CLOEXEC)
        ctl, ctl_worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        fds = (h2w_r, w2h_w, ctl_worker.fileno())
        try:
            proc, argv = await self._start(uid, fds, workdir, forked)
        except BaseException:
            for fd in (h2w_w, w2h_r):
                os.close(fd)
            ctl.close()
            if uid is not None and self.uids is not None:
                self.uids.release(uid)
            raise
        finally:
            os.close(h2w_r)
            os.close(w2h_w)
            ctl_worker.close()
        channel = await Channel.open(w2h_r, h2w_w, self.config.max_frame_bytes)
        report = IsolationReport(self.mode, ())
        worker = Worker(
            proc, channel, ctl, report, uid, seq, workdir=workdir if self.mode == "unsafe-dev" else None
        )
        try:
            ready = await channel.recv(self.config.start_timeout_s)
            if ready.get("op") == "failed":  # the fork server's tree could not set itself up
                raise ProtocolError(str(ready.get("error"))[-2000:])
        except (EOFError, ProtocolError) as e:
            await self.kill(worker)
            raise _EarlyExit((argv and self._diagnose(argv)) or str(e)) from None
        except TimeoutError:
            await self.kill(worker)
            raise IsolationError(
                f"the sandbox worker was not ready within {self.config.start_timeout_s} s"
            ) from None
        except BaseException:  # cancelled: no awaiting now; the uid stays claimed, subprocess reaps later
            worker.proc.kill()
            worker.channel.close()
            worker.ctl.close()
            raise
        worker.pids = process_tree(worker.proc.pid)
        try:
            worker.pidfd = os.pidfd_open(worker.pids[-1])
        except ProcessLookupError:
            await self.kill(worker)
            raise _EarlyExit("the worker died right after reporting ready") from None
        cgroup_error = self.cgroup_reason
        if self.cgroups is not None:
            try:  # in a thread: each cgroup.procs write waits for an RCU grace period (milliseconds)
                worker.cgroup = await asyncio.to_thread(self._cgroup, worker)
            except OSError as e:
                cgroup_error = f"cgroup setup failed: {e}"
        try:
            worker.report = self._report(worker, ready, cgroup_error)
        except IsolationError:
            await self.kill(worker)
            raise
        return worker

    def _cgroup(self, worker: Worker) -> Cgroup:
        """A leaf with this worker's limits, holding the interpreter only: bwrap's two helpers are trusted and
        allocate nothing, and with pids.max = 1 the interpreter cannot fork even without seccomp."""
        assert self.cgroups is not None
        leaf = self.cgroups.leaf(f"w{worker.uid if worker.uid is not None else worker.seq}")
        try:
            leaf.limit(self.memory_limit(0), 1, self.config.cpu_cores)
            leaf.attach(worker.pids[-1:])
        except OSError:
            leaf.remove()
            raise
        return leaf

    def _report(self, worker: Worker, ready: dict, cgroup_error: str) -> IsolationReport:
        applied = [x for x in ready.get("layers", []) if isinstance(x, str)]
        missing = {str(k): str(v) for k, v in dict(ready.get("missing", {})).items()}
        for layer in IN_WORKER_LAYERS:
            if layer not in applied and layer not in missing:
                missing[layer] = f"not used in {self.mode} mode"
        info = {
            k: v for k, v in dict(ready.get("info", {})).items() if k in ("landlock_abi", "uid", "groups")
        }
        host = []
        if self.mode == "bwrap":
            host.append("bwrap")
        elif self.config.isolation == "auto":
            missing["bwrap"] = "bubblewrap is not installed or does not work here"
        else:
            missing["bwrap"] = f"not used in {self.mode} mode"
        if worker.uid is not None:
            host.append("uid")
        else:
            missing["uid"] = self.uid_reason
        info["spawn"] = "fork-server" if isinstance(worker.proc, ForkedTree) else "exec"
        if worker.cgroup is not None:
            host.append("cgroup")
            info["cgroup"] = f"v{worker.cgroup.version}"
        else:
            missing["cgroup"] = cgroup_error
        report = IsolationReport(self.mode, tuple(host + applied), missing, info)
        unmet = report.unmet(self.config.min_isolation)
        if self.mode == "unsafe-dev":
            if not self.warned:
                self.warned = True
                message = ("UNSAFE: fathom sandbox in unsafe-dev mode -- model-written code runs as this user with "
                           "this machine's files and network. Development only; never for training on shared hosts.")  # fmt: skip
                log.warning(message)
                print(f"\n!!! {message}\n", flush=True)  # loud on purpose: logging may be off
        elif unmet:
            raise IsolationError(
                f"sandbox isolation is below the configured floor: missing {unmet}. {report.describe()}"
            )
        return report

    def _diagnose(self, argv: list[str]) -> str:
        """Re-run a worker that died before "ready" with stderr captured (rare path, blocking is fine)."""
        try:
            done = subprocess.run(argv, env=WORKER_ENV, cwd="/", stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=10)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
        return done.stderr.decode(errors="replace").strip()[-2000:]

    async def kill(self, worker: Worker) -> None:
        """SIGKILL the tree, reap it, remove its cgroup and work dir, free its uid. Idempotent."""
        worker.channel.close()
        worker.ctl.close()
        worker.cancel_stop()
        if worker.pidfd is not None:
            os.close(worker.pidfd)
            worker.pidfd = None
        # Inside out: bwrap's init dies (the kernel then kills the whole namespace) and the monitor, still alive,
        # reaps it and exits. Killing the monitor first would orphan init to PID 1, and not every PID 1 reaps.
        # A forked tree is the worker alone (pid 1 of its namespaces): it dies and the zygote reaps it.
        tree = worker.pids or process_tree(worker.proc.pid)
        if worker.proc.poll() is None:
            if len(tree) > 1 and parent_of(tree[1]) == worker.proc.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(tree[1], signal.SIGKILL)
            else:
                worker.proc.kill()
        if isinstance(worker.proc, ForkedTree):  # one wake-up when its monitor is gone, instead of polling
            await worker.proc.wait(1.0)
        delay = 0.0005
        for attempt in range(200):  # bounded: ~5 s
            if worker.proc.poll() is not None and not any(pid_alive(p) for p in tree[1:]):
                break
            if attempt == 40:  # ~1 s: something did not follow; take everything down at once
                worker.proc.kill()
                if worker.cgroup is not None:
                    worker.cgroup.kill_all()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        if worker.cgroup is not None:
            for _ in range(50):
                if worker.cgroup.remove():
                    break
                worker.cgroup.kill_all()
                await asyncio.sleep(0.02)
            worker.cgroup = None
        if worker.workdir is not None:
            shutil.rmtree(worker.workdir, onerror=_removal_failed)
            worker.workdir = None
        if isinstance(worker.proc, ForkedTree):
            worker.proc.close()
        if worker.uid is not None and self.uids is not None:
            self.uids.release(worker.uid)
            worker.uid = None

    def close(self) -> None:
        """Stop the fork server, remove the runtime directory and cgroup root; the caller kills workers first."""
        if self.fork_server is not None:
            self.fork_server.close()
            self.fork_server = None
        if self.cgroups is not None:
            self.cgroups.remove()
        if self.uids is not None:
            self.uids.close()
        shutil.rmtree(self.runtime, onerror=_removal_failed)


def _removal_failed(function: Callable, path: str, exc_info: tuple) -> None:
    """A temp dir that cannot be removed is logged and left for a later launcher to sweep once this process
    has exited (`sweep_runtime`): the sandbox is already down, so this is no reason to fail its close."""
    log.warning("could not remove %s (%s): %s", path, function.__name__, exc_info[1])


class _EarlyExit(Exception):
    """The worker died before reporting ready (bad flags, missing userns, unreadable interpreter...)."""
