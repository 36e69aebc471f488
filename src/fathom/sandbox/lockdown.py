"""Kernel layers a sandbox worker applies to itself: rlimits, no_new_privs, Landlock and a seccomp filter.

Runs inside the worker (stdlib and ctypes only, no ``fathom`` imports) before any untrusted code. Each
function either applies its layer or raises ``LayerUnavailable`` with the reason, so the worker can report
exactly which layers hold. It does not choose which layers are required (the host's floor does), and it does
not spawn, namespace or chown anything (``launch.py`` does that from the host side).

The seccomp filter is a hand-assembled classic-BPF deny list for x86_64 (other arches: unavailable). It
returns EPERM, so the model sees ``PermissionError``, for process creation (fork, clone: no threads either),
exec, sockets, ptrace, mounts and namespaces, kernel keyrings, io_uring, bpf, SysV IPC, memfd, uid changes
and TIOCSTI/TIOCLINUX. Everything else is allowed: an allowlist is tighter but brittle across CPython/glibc.
"""

from __future__ import annotations

import ctypes
import os
import resource

MiB = 1 << 20


class LayerUnavailable(Exception):
    """This layer cannot be applied on this kernel/arch; the message says why."""


# CDLL(None) is the already-loaded libc; find_library("c") would fork ldconfig (slow, denied in the jail).
# One handle, its functions resolved at import: a worker forked by the zygote then finds them built
# instead of allocating them anew in its copy-on-write heap.
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.prctl, _LIBC.syscall  # noqa: B018  # resolving caches the function objects on the handle


def _libc() -> ctypes.CDLL:
    return _LIBC


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise LayerUnavailable(f"{what}: {os.strerror(err)} (errno {err})")
    return ret


# ---- rlimits -------------------------------------------------------------------------------------------


def set_rlimits(limits: dict[str, int]) -> None:
    """Set soft = hard = value for each ``RLIMIT_<NAME>``; CPU gets a 2 s hard margin so SIGXCPU comes first."""
    for name, value in limits.items():
        which = getattr(resource, f"RLIMIT_{name.upper()}")
        hard = value + 2 if name.lower() == "cpu" else value
        resource.setrlimit(which, (value, hard))


# ---- prctl ---------------------------------------------------------------------------------------------

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38


def die_with_parent(expected_ppid: int) -> None:
    """SIGKILL this process when its parent dies; exit now if the parent is already gone (the race)."""
    _check(_libc().prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != expected_ppid:
        os._exit(1)


def no_new_privs() -> None:
    """No privilege gain through exec (required by Landlock and seccomp), and no core dumps or ptrace attach."""
    libc = _libc()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


# ---- Landlock ------------------------------------------------------------------------------------------

# syscall numbers are the same on every arch (they were added after the unified table)
_LL_CREATE, _LL_ADD_RULE, _LL_RESTRICT = 444, 445, 446
_FS_EXECUTE, _FS_WRITE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_ABI1 = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FS_REFER, _FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = (("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64))


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel struct is __attribute__((packed)): 12 bytes
    _fields_ = (("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    ret = _libc().syscall(_LL_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(ret, 0)


def landlock(read_dirs: list[str], write_dirs: list[str], rw_files: list[str]) -> int:
    """Restrict the filesystem to these paths, deny all TCP (ABI >= 4), scope signals and abstract sockets
    to this domain (ABI >= 6). Paths that do not exist are skipped. Returns the ABI used."""
    abi = landlock_abi()
    if abi < 1:
        raise LayerUnavailable("Landlock is not supported or not enabled by this kernel")
    fs = _FS_ABI1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    fs |= _FS_IOCTL_DEV if abi >= 5 else 0
    attr = _RulesetAttr(fs, _NET_BIND_TCP | _NET_CONNECT_TCP, _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # older kernels reject fields they do not know
    libc = _libc()
    ruleset = _check(
        libc.syscall(_LL_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), 0), "landlock ruleset"
    )
    file_rights = _FS_READ_FILE | _FS_WRITE | (_FS_TRUNCATE if abi >= 3 else 0)
    rules = [(p, _FS_READ_FILE | _FS_READ_DIR) for p in read_dirs]
    rules += [(p, fs & ~_FS_EXECUTE) for p in write_dirs]
    rules += [(p, file_rights) for p in rw_files]
    try:
        for path, rights in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                rule = _PathBeneath(rights & fs, fd)
                _check(libc.syscall(_LL_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), f"landlock rule {path}")
            finally:
                os.close(fd)
        _check(libc.syscall(_LL_RESTRICT, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


# ---- seccomp -------------------------------------------------------------------------------------------

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_RET_KILL_PROCESS, _RET_ALLOW, _RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_NR_IOCTL, _NR_CLONE3 = 16, 435
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

# x86_64 numbers, from asm/unistd_64.h
DENIED_X86_64 = {
    "process": (56, 57, 58, 59, 322),  # clone fork vfork execve execveat
    "net": (41, 53),  # socket socketpair
    # ptrace, process_vm_{read,write}v, kcmp, perf_event_open, pidfd_{getfd,open}
    "debug": (101, 310, 311, 312, 298, 438, 434),
    "mount": (165, 166, 155, 161, 428, 429, 430, 431, 432, 433, 442, 457, 458),
    "namespace": (272, 308),  # unshare setns
    "kernel": (321, 323, 250, 248, 249, 425, 426, 427, 246, 320, 175, 313, 176, 169, 167, 168, 163, 134),
    "clock": (164, 227, 305, 159),
    "misc": (172, 173, 135, 103, 179, 443, 303, 304, 256, 279, 153, 154, 212, 440, 319),  # ... memfd_create
    "ipc": (29, 30, 31, 64, 65, 66, 68, 69, 70, 71, 220, 240),  # SysV shm/sem/msg, mq_open
    "ids": (105, 106, 113, 114, 116, 117, 119, 122, 123),  # set*id
}


class _SockFilter(ctypes.Structure):
    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter)))


def seccomp_program() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions; jumps are relative, forward and below 256."""
    denied = sorted({nr for group in DENIED_X86_64.values() for nr in group})
    prog: list[tuple[int, int, int, int]] = [
        (_LD_ABS_W, 0, 0, 4),  # seccomp_data.arch
        (_JEQ_K, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_LD_ABS_W, 0, 0, 0),  # seccomp_data.nr
        (_JGE_K, 0, 1, _X32_BIT),  # x32 syscalls would bypass the table below
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_JEQ_K, 0, 1, _NR_CLONE3),  # ENOSYS, not EPERM: glibc then falls back to clone, which is denied
        (_RET_K, 0, 0, _RET_ERRNO | 38),
    ]
    eperm_at = len(prog) + 5 + len(denied) + 1  # after the ioctl block, the list and the final ALLOW
    prog.append((_JEQ_K, 0, 4, _NR_IOCTL))
    prog.append((_LD_ABS_W, 0, 0, 24))  # low word of args[1]: the kernel truncates the cmd to 32 bits
    prog.append((_JEQ_K, eperm_at - len(prog) - 1, 0, _TIOCSTI))
    prog.append((_JEQ_K, eperm_at - len(prog) - 1, 0, _TIOCLINUX))
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    for nr in denied:
        prog.append((_JEQ_K, eperm_at - len(prog) - 1, 0, nr))
    prog.append((_RET_K, 0, 0, _RET_ALLOW))
    prog.append((_RET_K, 0, 0, _RET_ERRNO | 1))  # EPERM
    assert len(prog) == eperm_at + 1 and eperm_at < 256
    return prog


def _build_filter() -> tuple[ctypes.Array, _SockFprog]:
    prog = seccomp_program()
    insns = (_SockFilter * len(prog))(*(_SockFilter(*insn) for insn in prog))
    return insns, _SockFprog(len(prog), insns)  # the array is kept: fprog only points into it


# Built once at import (the same for every worker), not in each worker after its fork.
_FILTER = _build_filter()


def seccomp() -> None:
    """Install the deny-list filter. Needs no_new_privs first. x86_64 only."""
    machine = os.uname().machine  # not platform.machine(): importing platform costs ~5 ms per worker
    if machine != "x86_64":
        raise LayerUnavailable(f"the seccomp table is x86_64-only (this is {machine})")
    fprog = _FILTER[1]
    _check(_libc().prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0), "seccomp filter")
