"""The fork server: one long-lived process per launcher that forks jailed workers without an exec.

Started by the host (as root) as ``python3 -I -S -B zygote.py CONFIG_JSON`` with one SOCK_SEQPACKET socket.
Once, it builds a read-only filesystem view in a mount namespace of its own (the same view bwrap gives a
worker: /usr, the /lib dirs, the interpreter prefix, /sbx, six device nodes; nothing writable), imports the
worker and freezes its heap. Then, per request (a worker config and the worker's three fds; no document,
no episode data ever reaches it), it takes the steps setpriv + bwrap take, without an exec:

  G: cloned straight into new user, mount, pid, net, ipc, uts and cgroup namespaces (pid 1 there). This
    process maps the worker's uid, and only it, into G's user namespace (setgroups denied). G closes every
    other fd, forbids nested user namespaces (max_user_namespaces=0, what bwrap --disable-userns gives),
    sets hostname "sbx", mounts fresh size-capped tmpfs on /tmp and /work (nosuid, nodev, noexec), becomes
    the worker's uid, dies with this process, drops every capability (bounding and ambient too), sets
    no_new_privs, and then goes on as the worker proper, in a new session: rlimits, no_new_privs, Landlock,
    seccomp, "ready", and only after the host has put it in its cgroup and sent the document, the model's
    cells.

One process a tree, not an init that forks the worker (as bwrap's exec chain has): a second Python process
cost every reset its copy-on-write faults, its fork and its exit, about a quarter of a tree's CPU
(bench/RESULTS.md). The worker cannot fork (seccomp, pids.max = 1), so there are no orphans for an init to
reap. Being pid 1 of its namespace, the kernel drops any signal the worker sends itself whose action is the
default (SIGKILL and SIGSTOP included); the host's own SIGKILL, SIGSTOP and SIGCONT come from an ancestor
namespace and always arrive, and a cell still ends at its time limits.

What a worker shares with the others: the read-only view (the same mounts bwrap binds), and what it
inherited from this process's memory: imported modules, the str hash seed and the address layout (no
per-exec ASLR). It holds nothing of any episode. ``random`` reseeds itself in every forked child.
The replies: {"pid": G's pid} plus G's pidfd, or {"error": why}. It does not talk to workers, decide
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
SYSCALLS = {
    "x86_64": {"pivot_root": 155, "capset": 126, "clone": 56},
    "aarch64": {"pivot_root": 41, "capset": 91, "clone": 220},
}
NAMESPACES = (
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
NR = SYSCALLS.get(os.uname().machine)
libc = ctypes.CDLL(None, use_errno=True)
_pylibc = ctypes.PyDLL(None, use_errno=True)  # holds the GIL: clone() must not run with it released


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


def clone(flags: int) -> int:
    """fork(), but the child starts in the new namespaces ``flags`` names (so it is pid 1 of its own pid
    namespace, with no process between it and this one). Python's own fork bookkeeping runs as in os.fork."""
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = _pylibc.syscall(
        ctypes.c_long(NR["clone"]), ctypes.c_ulong(flags | signal.SIGCHLD), None, None, None, None
    )
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


def init(zcfg: dict, request: dict, fds: list[int], proc_fd: int, zlive_r: int, go_r: int) -> None:
    """G, pid 1 of the worker's namespaces (user, mount, pid, net, ipc, uts, cgroup): finishes the jail,
    becomes the worker's uid with no capabilities and goes on as the worker. Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this process waits for its own child
    wcfg = request["cfg"]
    wcfg["fd_in"], wcfg["fd_out"], wcfg["fd_ctl"] = fds
    keep = sorted([*fds, proc_fd, zlive_r, go_r])
    lo = 3
    for fd in keep:  # everything else (the zygote's socket above all) is closed before anything else runs
        os.closerange(lo, fd)
        lo = fd + 1
    os.closerange(lo, 1 << 20)
    try:
        if os.read(go_r, 1) != b"1":  # the zygote writes this user namespace's maps first
            os._exit(1)
        os.close(go_r)
        uid = request["uid"]
        _write_at(proc_fd, "sys/user/max_user_namespaces", "0")  # what bwrap --disable-userns gives
        os.close(proc_fd)
        name = b"sbx"
        _ok(libc.sethostname(name, len(name)), "sethostname")
        size, opts = request["disk_bytes"], f"mode=0755,uid={uid},gid={uid}"
        for path in ("/tmp", "/work"):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={size},{opts}")
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        _die_with_parent(zlive_r)  # only now: a uid change clears the parent-death signal
        drop_caps(zcfg["last_cap"])
        _ok(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE")
    except BaseException:
        _report_failure(wcfg["fd_out"])
        os._exit(1)
    worker_main(wcfg)


def worker_main(wcfg: dict) -> None:
    """G goes on as the worker, exactly as if started by exec (its argv says so too)."""
    import worker

    code = 1
    try:
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


def _reap_children(signum: int, frame: object) -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def serve(zcfg: dict, sock: socket.socket, proc_fd: int) -> None:
    zlive_r, _zlive_w = os.pipe()  # the write end stays here: EOF on zlive_r means this process is gone
    signal.signal(signal.SIGCHLD, _reap_children)
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
            uid = int(request["uid"])
            go_r, go_w = os.pipe()
            # SIGCHLD is held until the pidfd is open: a tree that dies at once is not reaped before it
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
            try:
                pid = clone(NAMESPACES)
                if pid == 0:
                    try:
                        os.close(go_w)
                        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
                        init(zcfg, request, fds, proc_fd, zlive_r, go_r)
                    finally:
                        os._exit(1)
                os.close(go_r)
                try:
                    pidfd = os.pidfd_open(pid)
                    _write_at(proc_fd, f"{pid}/uid_map", f"{uid} {uid} 1\n")  # this uid only, as bwrap maps
                    _write_at(proc_fd, f"{pid}/setgroups", "deny")
                    _write_at(proc_fd, f"{pid}/gid_map", f"{uid} {uid} 1\n")
                    os.write(go_w, b"1")
                finally:
                    os.close(go_w)  # without the "1", the child exits
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
        os.setgroups([])  # a worker's user namespace denies setgroups: it must start with none
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
    libc.sethostname  # noqa: B018  # resolved here, once, not in every worker tree's copy of the heap
    gc.freeze()  # children do not touch the heap's pages just to collect them
    sock.send(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    serve(zcfg, sock, proc_fd)


if __name__ == "__main__":
    main(sys.argv)
