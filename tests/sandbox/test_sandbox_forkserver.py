"""The fork server: a forked worker has every layer an exec'd one has, shares nothing writable with another
worker, keeps nothing of the zygote, and the launcher falls back to exec when the fork server is gone.

Checked from the host through /proc (the worker has none): namespaces, credentials, capabilities, open
fds and the mount table of each worker. Needs root and bubblewrap (the fork server runs only there).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal

import pytest
from conftest import config, pid_alive

from fathom.sandbox import SandboxPool

NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bwrap") is None, reason="the fork server runs as root in bwrap mode"
)


def status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return {k: v.strip() for k, _, v in (line.partition(":") for line in f)}


def run(coro):
    return asyncio.run(coro)


def test_forked_workers_have_their_own_namespaces_uid_and_no_capabilities() -> None:
    async def go():
        async with SandboxPool(config("bwrap"), size=0, handle_signals=False) as pool:
            a = await pool.start(None, ctx_text="doc a")
            b = await pool.start(None, ctx_text="doc b")
            seen = await a.execute(
                "import os, socket\nprint(os.getpid(), os.getppid(), socket.gethostname())"
            )
            wa, wb = a.processes[-1], b.processes[-1]
            zygote = pool._launcher.fork_server.popen.pid
            ns = {
                n: [os.readlink(f"/proc/{p}/ns/{n}") for p in (os.getpid(), zygote, wa, wb)]
                for n in NAMESPACES
            }
            trees = [[status(p) for p in s.processes] for s in (a, b)]
            fds = sorted(os.readlink(f"/proc/{wa}/fd/{fd}") for fd in os.listdir(f"/proc/{wa}/fd"))
            with open(f"/proc/{wa}/mountinfo") as f:
                mounts = [line.split()[4:6] for line in f]
            with open(f"/proc/{wa}/uid_map") as f:
                uid_map = f.read().split()
            reports = (a.report, b.report)
            await a.close()
            await b.close()
            return seen, ns, trees, fds, mounts, uid_map, reports

    seen, ns, trees, fds, mounts, uid_map, reports = run(go())
    assert all(r.info["spawn"] == "fork-server" and r.level == "full" for r in reports), reports
    assert seen.stdout == "1 0 sbx\n"  # pid 1 of its own pid namespace (nothing above it there), own uts
    for name, (host, zygote, a, b) in ns.items():
        assert len({host, a, b}) == 3, f"{name} namespace shared: {ns[name]}"
        assert zygote not in (a, b), name
    uids = {tree[-1]["Uid"].split()[0] for tree in trees}
    assert len(uids) == 2 and "0" not in uids
    for tree in trees:
        assert len(tree) == 1  # the worker is pid 1 of its namespaces: one process a tree
        for proc in tree:  # no process of a tree holds a capability or another uid
            assert {proc[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {
                "0000000000000000"
            }
            assert proc["Uid"].split() == [tree[-1]["Uid"].split()[0]] * 4 and proc["Groups"] == ""
        assert tree[-1]["NoNewPrivs"] == "1" and tree[-1]["Seccomp"] == "2"
    assert uid_map == [trees[0][-1]["Uid"].split()[0]] * 2 + ["1"]  # its user namespace maps its uid only
    # stdio on /dev/null and its two pipes: not the zygote's socket, not /proc, not the document's fd
    assert fds[:3] == ["/dev/null"] * 3 and len(fds) == 5 and all(f.startswith("pipe:") for f in fds[3:])
    writable = [point for point, opts in mounts if "rw" in opts.split(",")]
    assert sorted(p for p in writable if not p.startswith("/dev/")) == ["/tmp", "/work"], mounts
    assert dict(mounts)["/"].startswith("ro")


def test_workers_do_not_share_their_tmp() -> None:
    async def go():
        async with SandboxPool(config("bwrap"), size=0, handle_signals=False) as pool:
            a = await pool.start(None, ctx_text="")
            b = await pool.start(None, ctx_text="")
            wrote = await a.execute(
                "open('/tmp/note', 'w').write('from a')\nopen('/work/note', 'w').write('a')"
            )
            seen = await b.execute("import os\nprint(os.listdir('/tmp'), os.listdir('/work'))")
            await a.close()
            await b.close()
            return wrote, seen

    wrote, seen = run(go())
    assert wrote.error is None
    assert seen.stdout == "[] []\n"


def test_fork_server_off_execs_each_worker() -> None:
    async def go():
        async with SandboxPool(config("bwrap", fork_server=False), size=0, handle_signals=False) as pool:
            sandbox = await pool.start(None, ctx_text="doc")
            result = await sandbox.execute("print(ctx)")
            report, launcher = sandbox.report, pool._launcher
            await sandbox.close()
            return result, report, launcher.fork_server

    result, report, server = run(go())
    assert result.stdout == "doc\n" and report.info["spawn"] == "exec" and report.level == "full"
    assert server is None


def test_a_killed_fork_server_takes_its_workers_and_the_launcher_falls_back_to_exec() -> None:
    async def go():
        async with SandboxPool(config("bwrap"), size=0, handle_signals=False) as pool:
            sandbox = await pool.start(None, ctx_text="doc")
            await sandbox.execute("x = 1")
            tree = sandbox.processes
            os.kill(pool._launcher.fork_server.popen.pid, signal.SIGKILL)
            for _ in range(250):  # each process of the tree dies with its parent
                if not any(pid_alive(p) for p in tree):
                    break
                await asyncio.sleep(0.02)
            died = [p for p in tree if pid_alive(p)]
            after = await sandbox.execute("print(x)")  # the worker is gone: restarted by exec
            again = await sandbox.execute("print(ctx)")
            report = sandbox.report
            await sandbox.close()
            return died, after, again, report

    left, after, again, report = run(go())
    assert left == []
    assert after.restarted and "died" in after.error
    assert again.stdout == "doc\n" and report.info["spawn"] == "exec" and report.level == "full"


def test_concurrent_first_spawns_start_one_fork_server() -> None:
    from fathom.sandbox.launch import Launcher
    from fathom.sandbox.proctree import parent_of

    async def go():
        launcher = Launcher(config("bwrap"))
        try:
            workers = await asyncio.gather(*(launcher.spawn() for _ in range(4)))
            script = os.path.join(launcher.worker_dir, "zygote.py").encode()
            zygotes = []
            for pid in (p for p in os.listdir("/proc") if p.isdigit()):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        # the zygote is this process's child; its forks (each worker's tree) carry its argv too
                        if script in f.read().split(b"\0") and parent_of(int(pid)) == os.getpid():
                            zygotes.append(int(pid))
                except OSError:
                    continue
            spawns = [w.report.info["spawn"] for w in workers]
            await asyncio.gather(*(launcher.kill(w) for w in workers))
            return zygotes, spawns
        finally:
            launcher.close()

    zygotes, spawns = run(go())
    assert spawns == ["fork-server"] * 4
    assert len(zygotes) == 1


def test_forked_workers_do_not_share_random_state() -> None:
    """Each tree is cloned from one zygote heap: `random` must reseed in every child (at-fork hook)."""

    async def go():
        async with SandboxPool(config("bwrap"), size=0, handle_signals=False) as pool:
            out = []
            for _ in range(3):
                sb = await pool.start(None, ctx_text="doc")
                out.append((await sb.execute("import random\nprint(random.getrandbits(64))")).stdout)
                assert sb.report.info["spawn"] == "fork-server"
                await sb.close()
            return out

    draws = run(go())
    assert len(set(draws)) == 3 and all(d.strip().isdigit() for d in draws), draws
