"""The fork server: one long-lived process per launcher that forks jailed workers without an exec.

Started by the host (as root) as ``python3 -I -S -B zygote.py CONFIG_JSON`` with one SOCK_SEQPACKET socket.
Once, it builds a read-only filesystem view in a mount namespace of its own (the same view bwrap gives a
worker: /usr, the /lib dirs, the interpreter prefix, /sbx, six device nodes; nothing writable), imports the
worker and freezes its heap. Then, per request (a worker config and the worker's three fds; no document,
no episode data ever reaches it), it forks a tree that takes the same steps as setpriv + bwrap:

  C (monitor, outside the worker's pid ns): every other fd closed; no groups; setresgid/setresuid to the
    worker's uid (caps gone); unshare user+mount+pid+net+ipc+uts+cgroup namespaces as that uid (a fresh
    user namespace per worker, mapping only that uid); no nested user namespaces (max_user_namespaces=0 in
    it); hostname "sbx"; fresh size-capped tmpfs on /tmp and /work (nosuid, nodev, noexec); it drops its caps
    and waits for G.
  G (pid 1 of the new pid ns): dies with C, drops every capability (bounding, ambient), forks W, reaps.
  W (pid 2): dies with G, new session, then the worker proper: rlimits, no_new_privs, Landlock, seccomp,
    "ready", and only after the host has put it in its cgroup and sent the document, the model's cells.

What a worker shares with the others: the read-only view (the same mounts bwrap binds), and what it
inherited from this process's memory: imported modules, the str hash seed and the address layout (no
per-exec ASLR). It holds nothing of any episode. ``random`` reseeds itself in every forked child.
The replies: {"pid": C's pid} plus C's pidfd, or {"error": why}. It does not talk to workers, decide
limits, or touch cgroups (``launch.py`` does). Linux x86_64/aarch64 only; ``launch.py`` falls back to
setpriv + bwrap when this process cannot start.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import signal
import socket
import sys
import traceback

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 4096, 16384, 1 << 18, 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SYSCALLS = {"x86_64": {"pivot_root": 155, "capset": 126}, "aarch64": {"pivot_root": 41, "capset": 91}}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
NR = SYSCALLS.get(os.uname().machine)
libc = ctypes.CDLL(None, use_errno=True)


def _ok(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _mount(src: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if s is None else s.encode() for s in (src, target, fstype, data)]
    _ok(libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {target}")


def _ro_bind(src: str, target: str) -> None:
    _mount(src, target, None, MS_BIND)  # not MS_REC: a submount of src stays hidden, never writable
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def build_root(cfg: dict) -> None:
    """A private mount namespace whose / is a read-only tmpfs holding only what a worker may see."""
    _ok(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = cfg["root"]
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for top in cfg["dirs"]:
        os.makedirs(root + top, 0o755, exist_ok=True)
        _ro_bind(top, root + top)
    for top, dest in cfg["symlinks"].items():
        os.symlink(dest, root + top)
    for name in ("tmp", "work", "dev"):
        os.makedirs(os.path.join(root, name), 0o755, exist_ok=True)
    os.mkdir(root + "/sbx", 0o755)
    _ro_bind(cfg["worker_dir"], root + "/sbx")
    _mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=0755")
    for name in DEVICES:
        if os.path.exists("/dev/" + name):
            open(f"{root}/dev/{name}", "w").close()
            _mount("/dev/" + name, f"{root}/dev/{name}", None, MS_BIND)
    _mount(None, root + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(root)
    _ok(libc.syscall(NR["pivot_root"], b".", b"."), "pivot_root")  # the old root ends up on top: drop it
    _ok(libc.umount2(b".", MNT_DETACH), "umount old root")
    os.chdir("/")


def drop_caps(last_cap: int) -> None:
    """No capabilities left in any set (bounding, ambient, effective, permitted, inheritable), no_new_privs."""
    _ok(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    for cap in range(last_cap + 1):
        _ok(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "PR_CAPBSET_DROP")
    _ok(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "PR_CAP_AMBIENT")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    data = (ctypes.c_uint32 * 6)()
    _ok(libc.syscall(NR["capset"], header, data), "capset")


def _write_at(dirfd: int, path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dirfd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _die_with_parent(parent_alive_fd: int | None = None) -> None:
    _ok(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
    if parent_alive_fd is not None:  # the parent may have died before the line above: then its pipe is at EOF
        os.set_blocking(parent_alive_fd, False)
        try:
            if os.read(parent_alive_fd, 1) == b"":
                os._exit(1)
        except BlockingIOError:
            pass
        os.close(parent_alive_fd)


def _reap(child: int) -> int:
    """Wait for every child (pid 1 inherits orphans) until ``child`` is gone; its exit code."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def monitor(zcfg: dict, request: dict, fds: list[int], proc_fd: int, zygote_pid: int) -> None:
    """C: from the zygote's child to the worker's three processes. Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this process waits for its own child
    wcfg = request["cfg"]
    wcfg["fd_in"], wcfg["fd_out"], wcfg["fd_ctl"] = fds
    keep = sorted([*fds, proc_fd])
    lo = 3
    for fd in keep:  # everything else (the zygote's socket above all) is closed before anything else runs
        os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 1 << 20)
    try:
        uid = request["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to uid: every capability is gone
        # the uid change made this process undumpable, which keeps it from writing its own /proc/self maps
        _ok(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "PR_SET_DUMPABLE")
        _die_with_parent()  # only now: a uid change clears the parent-death signal
        if os.getppid() != zygote_pid:
            os._exit(1)
        flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
        _ok(libc.unshare(flags | CLONE_NEWCGROUP), "unshare")
        _write_at(proc_fd, "self/uid_map", f"{uid} {uid} 1\n")
        _write_at(proc_fd, "self/setgroups", "deny")
        _write_at(proc_fd, "self/gid_map", f"{uid} {uid} 1\n")
        _write_at(proc_fd, "sys/user/max_user_namespaces", "0")  # what bwrap --disable-userns gives
        os.close(proc_fd)
        name = b"sbx"
        _ok(libc.sethostname(name, len(name)), "sethostname")
        size = request["disk_bytes"]
        for path in ("/tmp", "/work"):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={size},mode=0755")
        alive_r, alive_w = os.pipe()
        g = os.fork()
        if g == 0:
            os.close(alive_w)
            init(zcfg, wcfg, alive_r)
        os.close(alive_r)
        drop_caps(zcfg["last_cap"])
        _ok(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")
    except BaseException:
        _report_failure(fds[1])
        os._exit(1)
    for fd in fds:
        os.close(fd)
    os._exit(_reap(g))


def init(zcfg: dict, wcfg: dict, alive_r: int) -> None:
    """G, pid 1 of the worker's pid namespace: no capabilities, forks the worker, reaps."""
    try:
        _die_with_parent(alive_r)
        drop_caps(zcfg["last_cap"])
        _ok(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")
        alive_r, alive_w = os.pipe()
        w = os.fork()
        if w == 0:
            os.close(alive_w)
            worker_main(wcfg, alive_r)
        os.close(alive_r)
    except BaseException:
        _report_failure(wcfg["fd_out"])
        os._exit(1)
    for fd in (wcfg["fd_in"], wcfg["fd_out"], wcfg["fd_ctl"]):
        os.close(fd)  # only the worker holds the pipes: its death is the host's EOF
    os._exit(_reap(w))


def worker_main(wcfg: dict, alive_r: int) -> None:
    """W, pid 2: the worker, exactly as if started by exec (its argv says so too)."""
    import worker

    code = 1
    try:
        _die_with_parent(alive_r)
        os.setsid()
        gc.enable()
        sys.argv = ["/sbx/worker.py", json.dumps(wcfg)]
        sys.modules["__main__"] = worker  # as when it runs as a script: nothing of the zygote shows
        worker.main(sys.argv)
        code = 0
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _report_failure(fd_out: int) -> None:
    """Tell the host why the tree could not start, in place of the worker's "ready" frame."""
    import protocol

    with contextlib.suppress(OSError):
        protocol.write_frame(fd_out, {"op": "failed", "error": traceback.format_exc()[-2000:]})


def _reap_monitors(signum: int, frame: object) -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def serve(zcfg: dict, sock: socket.socket, proc_fd: int) -> None:
    zygote_pid = os.getpid()
    signal.signal(signal.SIGCHLD, _reap_monitors)
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
        if not msg:
            os._exit(0)  # the host closed its end
        reply: dict = {}
        pidfd = None
        try:
            request = json.loads(msg)
            if len(fds) != 3:
                raise ValueError(f"expected 3 fds, got {len(fds)}")
            # SIGCHLD is held until the pidfd is open: a monitor that dies at once is not reaped before it
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
            try:
                pid = os.fork()
                if pid == 0:
                    try:
                        sock.close()
                        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
                        monitor(zcfg, request, fds, proc_fd, zygote_pid)
                    finally:
                        os._exit(1)
                pidfd = os.pidfd_open(pid)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            reply["pid"] = pid
        except Exception as e:  # a bad request or a failed fork: the host is told, the server lives on
            reply["error"] = f"{type(e).__name__}: {e}"
        finally:
            for fd in fds:
                os.close(fd)
        socket.send_fds(sock, [json.dumps(reply).encode()], [pidfd] if pidfd is not None else [])
        if pidfd is not None:
            os.close(pidfd)


def main(argv: list[str]) -> None:
    zcfg = json.loads(argv[1])
    _die_with_parent()
    if os.getppid() != zcfg["host_pid"]:
        os._exit(1)
    sock = socket.socket(fileno=zcfg["fd"])
    try:
        if NR is None:
            raise OSError(f"the fork server does not know this arch ({os.uname().machine})")
        proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        with open("/proc/sys/kernel/cap_last_cap") as f:
            zcfg["last_cap"] = int(f.read())
        build_root(zcfg)
        sys.path.insert(0, "/sbx")
        import worker  # noqa: F401  # the imports every worker needs, done once here

        sys.path.remove("/sbx")
    except BaseException:
        sock.send(json.dumps({"error": traceback.format_exc()[-2000:]}).encode())
        os._exit(1)
    gc.freeze()  # children do not touch the heap's pages just to collect them
    sock.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    serve(zcfg, sock, proc_fd)


if __name__ == "__main__":
    main(sys.argv)
