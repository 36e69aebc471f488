"""Hostile code against the sandbox, in every isolation mode this machine supports.

Per mode (and bwrap once more with exec'd instead of forked workers), every case runs concurrently, each in a fresh episode A started from one pool, while one episode
B stays live throughout. For every case we assert: the model got a clear error (or harmless output), the
host is untouched (no canary file written, the fake secret never seen, no process left behind or started
outside the worker), A either kept its variables or was restarted and said so, and B is unaffected.
unsafe-dev runs only the cases that do not need kernel isolation (limits, protocol, state damage).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from conftest import MODES, Recorder, config, mode_supported, pid_alive, processes_of_uid, real_uid

from fathom.sandbox import CellResult, SandboxPool

pytestmark = pytest.mark.hostile

JAILED = ("bwrap", "plain")  # cases that need the kernel layers
ALL = MODES
SECRET = f"fathom-fake-secret-{uuid.uuid4().hex}"
DOC = "ledger line\n" * 1000
FD = "import sys, json, os, struct\nfds = json.loads(sys.argv[-1])\n"  # the worker's own pipe fds
LIBC = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
RAISE_ERRNO = "if r == -1:\n    raise OSError(ctypes.get_errno(), 'denied')\n"


@dataclass(frozen=True)
class Case:
    name: str
    code: str  # CANARY_PATH, HOST_PID, B_PID and REPO_FILE are filled in
    expect: Callable[[CellResult], bool]  # what the model must see
    modes: tuple[str, ...] = ALL
    restart: bool | None = False  # must (True) / must not (False) / may (None) restart the worker
    followup: str = "print(a_state + 1)"
    expect_followup: Callable[[CellResult], bool] | None = None
    # where the worker is pid 1 of its namespaces (fork-server trees): the kernel drops a signal it sends
    # itself whose action is the default (SIGKILL and SIGSTOP included), so (expect, restart) differ
    as_pid1: tuple[Callable[[CellResult], bool], bool | None] | None = None


def err(*needles: str) -> Callable[[CellResult], bool]:
    """The cell failed with an error mentioning any of the needles."""
    return lambda r: r.error is not None and any(n in r.error for n in needles)


def restarted_with(needle: str) -> Callable[[CellResult], bool]:
    return lambda r: r.restarted and needle in r.error and "every variable was lost" in r.error


DENIED = err("PermissionError", "[Errno 1]")  # EPERM from seccomp, EACCES from Landlock
MISSING_OR_DENIED = err("PermissionError", "FileNotFoundError", "[Errno 1]", "[Errno 13]")

CASES = [
    # ---- resource exhaustion -----------------------------------------------------------------------------
    Case("cpu_loop", "while True:\n    pass", lambda r: r.timed_out and "TimeoutError" in r.error),
    Case("cpu_loop_ignoring_the_timer", "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass",
         lambda r: r.timed_out and restarted_with("hard time limit")(r), restart=True),
    Case("memory_one_huge_string", "s = 'x' * (10 ** 11)", err("MemoryError")),
    # bytes() is calloc'd: the pages are never touched, so this is fast even on a loaded box
    Case("memory_growing_list", "def grow():\n    xs = []\n    while True:\n        xs.append(bytes(10**8))\ngrow()",
         err("MemoryError")),
    Case("fork_bomb", "import os\nwhile True:\n    os.fork()", DENIED, JAILED),
    Case("thread_bomb", "import threading\nfor _ in range(10000):\n    threading.Thread(target=len, args=('',)).start()",
         err("RuntimeError: can't start new thread"), JAILED),
    Case("subprocess_bomb", "import subprocess\nfor _ in range(100):\n    subprocess.Popen(['sleep', '100'])", DENIED, JAILED),
    Case("disk_one_big_file", "with open('big.bin', 'wb') as f:\n    while True:\n        f.write(b'x' * 2**20)",
         err("[Errno 27] File too large", "[Errno 28] No space", "PermissionError")),
    Case("disk_many_small_files", "for i in range(100000):\n    with open(f'f{i}', 'wb') as f:\n        f.write(b'x' * 10**5)",
         err("[Errno 28] No space", "PermissionError"), JAILED),
    Case("disk_tmp_and_shm", "for d in ('/tmp', '/dev/shm', '/var/tmp'):\n    try:\n        with open(d + '/fill', 'wb') as f:\n"
         "            for _ in range(10):\n                f.write(b'x' * 4 * 2**20)\n        print(d, 'WROTE')\n"
         "    except OSError as e:\n        print(d, type(e).__name__)",
         lambda r: r.error is None and "WROTE" not in r.stdout and r.stdout.count("\n") == 3, JAILED),
    Case("giant_stdout", "print('y' * 10**7)", lambda r: r.truncated_chars == 10**7 + 1 - 2000
         and r.stdout.endswith(f"[... {10**7 + 1 - 2000} chars truncated]") and len(r.stdout) < 2100),
    Case("print_flood", "for i in range(10**5):\n    print(i)", lambda r: r.truncated_chars > 10**5 and len(r.stdout) < 2100),
    Case("stderr_flood", "import sys\nsys.stderr.write('z' * 10**7)", lambda r: r.truncated_chars == 10**7 - 2000),
    Case("raw_fd1_flood", "import os\nfor _ in range(100):\n    os.write(1, b'x' * 10**5)", lambda r: r.error is None and r.stdout == ""),
    Case("deep_recursion", "def f(n):\n    return f(n + 1)\nf(0)", err("RecursionError")),
    Case("deep_recursion_unlimited", "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)",
         err("MemoryError", "RecursionError", "TimeoutError", "died"), restart=None),
    # ---- escapes ---------------------------------------------------------------------------------------------
    Case("os_system", "import os\nos.system('touch CANARY_PATH')", DENIED, JAILED),
    Case("subprocess_run", "import subprocess\nsubprocess.run(['touch', 'CANARY_PATH'])", DENIED, JAILED),
    Case("os_execv", "import os\nos.execv('/bin/sh', ['sh', '-c', 'touch CANARY_PATH'])", DENIED, JAILED),
    Case("ctypes_execve", LIBC + "argv = (ctypes.c_char_p * 4)(b'/bin/sh', b'-c', b'touch CANARY_PATH', None)\n"
         "r = libc.execve(b'/bin/sh', argv, None)\n" + RAISE_ERRNO, err("[Errno 1]"), JAILED),
    Case("ctypes_raw_fork_and_clone", LIBC + "r = libc.syscall(57)\n" + RAISE_ERRNO, err("[Errno 1]"), JAILED),
    Case("ptrace_host", LIBC + "r = libc.ptrace(16, HOST_PID, 0, 0)\n" + RAISE_ERRNO, err("[Errno 1]", "[Errno 3]"), JAILED),
    Case("read_etc_shadow", "print(open('/etc/shadow').read())", MISSING_OR_DENIED, JAILED),
    Case("read_host_repo", "print(open(REPO_FILE).read()[:200])", MISSING_OR_DENIED, JAILED),
    Case("list_root_home", "import os\nprint(os.listdir('/root'))", MISSING_OR_DENIED, JAILED),
    Case("read_host_proc", "print(open('/proc/HOST_PID/environ').read())", MISSING_OR_DENIED, JAILED),
    Case("list_proc", "import os\nprint(os.listdir('/proc'))", MISSING_OR_DENIED, JAILED),
    Case("symlink_to_etc", "import os\nos.symlink('/etc', 'etc_link')\nprint(open('etc_link/hostname').read())",
         MISSING_OR_DENIED, JAILED),
    Case("env_secrets", "import os\nprint(dict(os.environ))", lambda r: r.error is None and "PATH" in r.stdout),
    Case("kill_host", "import os\nos.kill(HOST_PID, 9)", err("PermissionError", "ProcessLookupError"), JAILED),
    Case("kill_other_episode", "import os\nos.kill(B_PID, 9)", err("PermissionError", "ProcessLookupError"), JAILED),
    Case("kill_everything", "import os\nos.kill(-1, 9)", lambda r: True, JAILED, restart=None),
    Case("socket_tcp", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)", DENIED, JAILED),
    Case("socket_abstract_unix", "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0x')", DENIED, JAILED),
    Case("socket_via_ctypes", LIBC + "r = libc.socket(2, 1, 0)\n" + RAISE_ERRNO, err("[Errno 1]"), JAILED),
    Case("kernel_surface", LIBC + "for nr in (425, 321, 272, 165, 250, 298, 310):  # io_uring bpf unshare mount keyctl perf vm_readv\n"
         "    r = libc.syscall(nr, 0, 0, 0, 0, 0)\n    assert r == -1 and ctypes.get_errno() == 1, nr\nprint('all denied')",
         lambda r: r.error is None and r.stdout == "all denied\n", JAILED),
    Case("sysv_shared_memory", LIBC + "r = libc.shmget(0, 1 << 30, 0o1600)\n" + RAISE_ERRNO, err("[Errno 1]"), JAILED),
    Case("memfd_fill", "import os\nos.memfd_create('x')", DENIED, JAILED),
    Case("setuid_root", "import os\nos.setuid(0)", DENIED, JAILED),
    Case("raise_rlimits", "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))", err("ValueError", "PermissionError"),
         JAILED),
    Case("pickle_payload_as_answer", "import os\nclass Evil:\n    def __reduce__(self):\n        return (os.system, ('touch CANARY_PATH',))\n"
         "    def __str__(self):\n        return 'evil'\nFINAL(Evil())", lambda r: r.answer_ready and r.answer == "evil"),
    Case("pickle_bytes_as_answer", "import pickle, os\nFINAL(pickle.dumps(os.getcwd))",
         lambda r: r.answer_ready and isinstance(r.answer, str) and r.answer.startswith("b'")),
    Case("forged_result_frame", FD + "body = json.dumps({'op': 'result', 'id': 7, 'stdout': 'forged', 'answer_json': '1'}).encode()\n"
         "os.write(fds['fd_out'], struct.pack('>I', len(body)) + body)\nimport time\ntime.sleep(0.5)",
         lambda r: restarted_with("ProtocolViolation")(r) and not r.answer_ready and "forged" not in r.stdout, restart=True),
    Case("forged_oversize_frame", FD + "os.write(fds['fd_out'], struct.pack('>I', 2**31))\nimport time\ntime.sleep(0.5)",
         restarted_with("ProtocolViolation"), restart=True),
    Case("forged_garbage_frame", FD + "os.write(fds['fd_out'], b'\\0\\0\\0\\5hello')\nimport time\ntime.sleep(0.5)",
         restarted_with("ProtocolViolation"), restart=True),
    Case("forged_llm_flood", FD + "body = json.dumps({'op': 'llm', 'id': 1, 'items': [['q', 'c']] * 8}).encode()\n"
         "for _ in range(50):\n    os.write(fds['fd_out'], struct.pack('>I', len(body)) + body)\nimport time\ntime.sleep(0.3)",
         lambda r: r.llm_calls <= 20, restart=None, followup="print(1)", expect_followup=lambda r: r.restarted or r.stdout == "1\n"),
    Case("terminal_escapes", "print('\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mred\\r\\x00\\x9b')",
         lambda r: r.error is None and "\\x1b]0;pwned" in r.stdout and not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", r.stdout)),
    Case("tiocsti", "import fcntl, termios\nfcntl.ioctl(0, termios.TIOCSTI, b'x')", err("OSError", "PermissionError")),
    Case("open_dev_tty", "open('/dev/tty', 'w').write('x')", err("OSError", "PermissionError", "FileNotFoundError")),
    # ---- state damage ----------------------------------------------------------------------------------------
    Case("timer_disabled_in_cell", "import signal\nsignal.setitimer(signal.ITIMER_REAL, 0)\nwhile True:\n    pass",
         restarted_with("hard time limit"), restart=True),
    Case("timer_handler_replaced_between_cells", "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)",
         lambda r: r.error is None, followup="while True:\n    pass",
         expect_followup=lambda r: r.timed_out and not r.restarted),
    Case("alarm_with_default_action", "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_DFL)\nsignal.alarm(1)\ntime.sleep(5)",
         restarted_with("the REPL process died"), restart=True, as_pid1=(restarted_with("hard time limit"), True)),
    Case("close_the_pipes", FD + "os.close(fds['fd_out'])\nos.close(fds['fd_in'])", restarted_with("died"), restart=True),
    Case("monkeypatch_builtins", "import builtins\nbuiltins.len = None\nbuiltins.print = None\nbuiltins.isinstance = None",
         lambda r: r.error is None, followup="print(len('abc'), a_state)", expect_followup=lambda r: r.stdout == "3 1\n"),
    Case("monkeypatch_llm_stub", "llm = lambda *a: 'fake'\nllm_batch = None\nFINAL = None",
         lambda r: r.error is None, followup="print(llm('q', 'cc'), a_state)", expect_followup=lambda r: r.stdout == "echo q [2] 1\n"),
    Case("monkeypatch_worker_internals", "import __main__\n__main__.protocol.write_frame = None", restarted_with("died"), restart=True),
    Case("exhaust_llm_budget", "for i in range(1000):\n    llm('q', 'c')", err("llm budget exhausted: 20 calls per episode, 0 left"),
         followup="print(a_state)\nllm('q')", expect_followup=err("llm budget exhausted")),
    Case("llm_batch_over_cap", "llm_batch([('q', 'c')] * 100000)", err("ValueError: llm_batch() takes at most 64 items")),
    Case("llm_huge_input", "llm('x' * 10**7)", err("ValueError: llm() input is 10000000 characters")),
    Case("sys_exit", "import sys\nsys.exit(3)", err("SystemExit: 3")),
    Case("os_exit", "import os\nos._exit(0)", restarted_with("died"), restart=True),
    Case("self_sigkill", "import os\nos.kill(os.getpid(), 9)", restarted_with("died"), restart=True,
         as_pid1=(lambda r: r.error is None, False)),
    Case("self_sigstop", "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)", restarted_with("hard time limit"), restart=True,
         as_pid1=(lambda r: r.error is None, False)),
    Case("segfault", "import ctypes\nctypes.string_at(0)", restarted_with("died"), restart=True),
    # traceback's own bare except catches the timer inside __str__: the model still gets a clear error
    Case("exception_whose_str_hangs", "class E(Exception):\n    def __str__(self):\n        while True:\n            pass\nraise E()",
         err("E: <exception str() failed>", "TimeoutError"), restart=None),
    Case("answer_whose_str_is_huge", "class A:\n    def __str__(self):\n        return 'a' * 10**7\nFINAL(A())",
         lambda r: r.answer_ready and r.answer == "a" * 500),
    Case("answer_nested_too_deep", "x = []\nfor _ in range(100000):\n    x = [x]\nFINAL(x)",
         lambda r: r.error is not None and "RecursionError" in r.error),
]  # fmt: skip


@dataclass
class Outcome:
    result: CellResult
    followup: CellResult
    extra_processes: list[int]  # processes of A's uid that are not A's tree, right after the attack
    left_alive: list[int]  # A's processes alive after close
    handler_calls: int


@dataclass
class ModeRun:
    mode: str
    outcomes: dict[str, Outcome]
    canary_dir: str
    b_before: list[int]
    b_after: CellResult
    b_alive: bool
    leftover_paths: list[str]
    pid1: bool  # the workers are pid 1 of their namespaces (fork-server trees)


async def attack(pool: SandboxPool, case: Case, fmt: dict, b_pid: int, sem: asyncio.Semaphore) -> Outcome:
    async with sem:
        recorder = Recorder()
        a = await pool.start(None, recorder, ctx_text=DOC)
        try:
            await a.execute("a_state = 1")
            code = case.code.replace("CANARY_PATH", os.path.join(fmt["canary_dir"], case.name))
            code = code.replace("HOST_PID", str(os.getpid())).replace("B_PID", str(b_pid))
            code = code.replace("REPO_FILE", repr(os.path.abspath(__file__)))
            result = await a.execute(code)
            tree = a.processes
            uid = real_uid(tree[-1])
            extra = [p for p in processes_of_uid(uid) if p not in tree] if uid else []
            followup = await a.execute(case.followup)
        finally:
            pids = a.processes
            await a.close()
        return Outcome(result, followup, extra, [p for p in pids if pid_alive(p)], recorder.calls)


async def run_mode(run: str) -> ModeRun:
    """``run`` is a mode, or "bwrap-exec": bwrap mode with each worker exec'd instead of forked."""
    mode = run.removesuffix("-exec")
    canary_dir = tempfile.mkdtemp(prefix="fathom-canary-")
    os.chmod(canary_dir, 0o777)  # writable by any uid: only the sandbox keeps a worker out
    fmt = {"canary_dir": canary_dir}
    os.environ["FATHOM_FAKE_SECRET"] = SECRET
    cfg = config(mode, fork_server=not run.endswith("-exec"))
    async with SandboxPool(cfg, size=8, handle_signals=False) as pool:
        runtime = pool._launcher.runtime
        cgroup_dirs = list((pool._launcher.cgroups.dirs if pool._launcher.cgroups else {}).values())
        b = await pool.start(None, Recorder(), ctx_text=DOC)
        await b.execute("b_state = 41")
        b_before = b.processes
        pid1 = b.report.info.get("spawn") == "fork-server"
        sem = asyncio.Semaphore(16)  # 2 cores: enough overlap to share the timeout waits
        cases = [c for c in CASES if mode in c.modes]
        done = await asyncio.gather(*(attack(pool, c, fmt, b_before[-1], sem) for c in cases))
        b_after = await b.execute("print(b_state + 1)")
        b_alive = all(pid_alive(p) for p in b_before) and b.processes == b_before
    leftovers = [p for p in [runtime, *cgroup_dirs] if os.path.exists(p)]
    return ModeRun(mode, {c.name: o for c, o in zip(cases, done, strict=True)}, canary_dir, b_before, b_after, b_alive,
                   leftovers, pid1)  # fmt: skip


def brief(r: CellResult) -> str:
    return f"stdout={r.stdout[:300]!r} error={(r.error or '')[-600:]!r} timed_out={r.timed_out} restarted={r.restarted}"


@pytest.fixture(scope="module", params=(*MODES, "bwrap-exec"))
def mode_run(request: pytest.FixtureRequest) -> Iterator[ModeRun]:
    reason = mode_supported(request.param.removesuffix("-exec"))
    if reason is not None:
        pytest.skip(f"{request.param} not supported here: {reason}")
    result = asyncio.run(run_mode(request.param))
    yield result
    shutil.rmtree(result.canary_dir, ignore_errors=True)


def test_suite_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


def test_second_episode_and_host_unaffected(mode_run: ModeRun) -> None:
    assert mode_run.b_after.stdout == "42\n" and not mode_run.b_after.restarted
    assert mode_run.b_alive, "episode B's processes changed during the attacks"
    assert os.listdir(mode_run.canary_dir) == []
    assert mode_run.leftover_paths == []


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile(case: Case, mode_run: ModeRun) -> None:
    if mode_run.mode not in case.modes:
        pytest.skip(f"{case.name} needs kernel isolation; {mode_run.mode} has none by design")
    o = mode_run.outcomes[case.name]
    r = o.result
    expect, restart = case.as_pid1 if mode_run.pid1 and case.as_pid1 else (case.expect, case.restart)
    assert expect(r), f"unexpected result for the model: {brief(r)}"
    if restart is not None:
        assert r.restarted == restart, brief(r)
    if case.expect_followup is not None:
        assert case.expect_followup(o.followup), brief(o.followup)
    elif r.restarted:
        assert "NameError: name 'a_state' is not defined" in o.followup.error
    else:
        assert o.followup.stdout == "2\n", brief(o.followup)
    texts = [r.stdout, r.error or "", str(r.answer), o.followup.stdout, o.followup.error or ""]
    assert not any(SECRET in t for t in texts), "the host's secret reached the sandbox"
    assert not os.path.exists(os.path.join(mode_run.canary_dir, case.name)), "a file was written on the host"
    assert o.extra_processes == [], "a process outside the worker tree ran under the sandbox uid"
    assert o.left_alive == [], "a worker process survived close()"
    assert o.handler_calls <= 20
