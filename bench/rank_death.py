"""Rank death: kill one process of a multi-process GRPO run while its rollouts are in flight, then check that
the launcher gives up with a non-zero status in bounded time and that nothing it started is left running.

    python bench/rank_death.py --target rank --log kill.log -- \\
        accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 2 -m fathom grpo ...

1. Starts the command (the launcher: ``accelerate launch``, torchrun's elastic agent) in a session of its own.
2. Watches its process tree through /proc until the rollouts are in flight: every rank is up and the
   target rank has live sandboxes (``bwrap`` and the jailed REPL worker, ``/sbx/worker.py``, it runs).
3. SIGKILLs the target: ``rank`` (one rank, ``--kill-rank``) or ``launcher`` (the agent itself).
4. Waits for the launcher to exit (``--exit-timeout-s``), then up to ``--grace-s`` for every process ever seen
   in the tree to be gone. Every process is tracked by (pid, start time), so a reused pid is not mistaken for
   a survivor, and processes adopted by init after their parent died are still found.
5. Prints the tree before the kill and what is left after, and PASS or FAIL (exit status 0 or 1). Survivors,
   which it started, are killed afterwards so a failed check leaves the machine clean.

PASS: no process of the tree is left (zombies, dead processes waiting for init to reap them, are listed but
do not count) and, for ``--target rank``, the launcher exited non-zero within the timeout.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # clock ticks since boot: (pid, start) names one process for good
    state: str
    uid: int
    cmd: str

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start)


def read_proc(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat.rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        uid = os.stat(f"/proc/{pid}").st_uid
    except (OSError, IndexError):
        return None
    return Proc(
        pid, int(fields[1]), int(fields[19]), fields[0], uid, cmd or stat.split("(", 1)[1].split(")")[0]
    )


def table() -> dict[int, Proc]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (p := read_proc(int(name))) is not None:
            out[p.pid] = p
    return out


def descendants(procs: dict[int, Proc], roots: set[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, stack = set(), [r for r in roots if r in procs]
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def rank_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
        return int(env[b"RANK"]) if b"RANK" in env else None
    except (OSError, ValueError):
        return None


def catches_sigterm(pid: int) -> bool | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except OSError:
        return None
    return None


def is_bwrap(p: Proc) -> bool:
    return p.cmd.split(" ", 1)[0].endswith("bwrap")


def is_sandbox(p: Proc) -> bool:
    return is_bwrap(p) or is_worker(p)


def is_worker(p: Proc) -> bool:
    """The jailed interpreter itself (under bwrap: /sbx/worker.py; plain isolation: worker.py in a temp dir);
    bwrap's own command line ends with the same words."""
    return "worker.py {" in p.cmd and not is_bwrap(p)


def alive(p: Proc) -> Proc | None:
    """The same process, if it still exists (same pid and start time)."""
    now = read_proc(p.pid)
    return now if now is not None and now.start == p.start else None


def role(p: Proc, launcher: int, ranks: dict[int, int]) -> str:
    if p.pid == launcher:
        return "launcher"
    if p.pid in ranks:
        return f"rank {ranks[p.pid]}"
    return "sandbox" if is_sandbox(p) else "other"


def listing(procs: list[Proc], launcher: int, ranks: dict[int, int], boot: float) -> str:
    now = time.time()
    lines = [f"  {'pid':>7} {'ppid':>7} {'uid':>10} {'state':>5} {'age_s':>6}  {'role':<9} command"]
    for p in sorted(procs, key=lambda p: p.pid):
        age = now - (boot + p.start / CLK_TCK)
        lines.append(
            f"  {p.pid:>7} {p.ppid:>7} {p.uid:>10} {p.state:>5} {age:6.0f}  {role(p, launcher, ranks):<9} {p.cmd[:110]}"
        )
    return "\n".join(lines)


def boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime"):
                return float(line.split()[1])
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("rank", "launcher"), default="rank")
    ap.add_argument("--kill-rank", type=int, default=1)
    ap.add_argument("--ranks", type=int, default=2, help="processes the launcher starts")
    ap.add_argument("--wait-s", type=float, default=600, help="longest wait for rollouts in flight")
    ap.add_argument("--exit-timeout-s", type=float, default=120, help="the launcher must exit within this")
    ap.add_argument("--grace-s", type=float, default=15, help="then every process must be gone within this")
    ap.add_argument("--log", type=Path, required=True, help="the launcher's stdout and stderr")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no command after --")
    boot = boot_time()

    with args.log.open("w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    launcher = proc.pid
    seen: dict[tuple[int, int], Proc] = {}
    ranks: dict[int, int] = {}  # pid -> rank

    def sample() -> dict[int, Proc]:
        """Record every process under the launcher, or under any process recorded before (orphans adopted by
        init stay found through their recorded parents)."""
        procs = table()
        roots = {launcher} | {p.pid for p in seen.values() if (q := procs.get(p.pid)) and q.start == p.start}
        for pid in descendants(procs, roots):
            seen.setdefault(procs[pid].key, procs[pid])
        for pid, p in procs.items():
            if p.ppid == launcher and pid not in ranks and (r := rank_of(pid)) is not None:
                ranks[pid] = r
        return procs

    print(f"launcher pid {launcher}: {' '.join(command)[:300]}", flush=True)
    started = time.monotonic()
    target_pid = None
    while True:
        procs = sample()
        if proc.poll() is not None:
            print(
                f"FAIL: the launcher exited (status {proc.returncode}) before rollouts were in flight; see {args.log}"
            )
            return 1
        if len(ranks) == args.ranks:
            tree = descendants(procs, {launcher})
            by_rank = {
                r: sum(1 for pid in descendants(procs, {rp}) if is_worker(procs[pid]))
                for rp, r in ranks.items()
                if rp in tree
            }
            want = args.kill_rank if args.target == "rank" else None
            if (want is None and any(by_rank.values())) or (want is not None and by_rank.get(want, 0) > 0):
                target_pid = (
                    launcher if args.target == "launcher" else next(p for p, r in ranks.items() if r == want)
                )
                break
        if time.monotonic() - started > args.wait_s:
            print(f"FAIL: no rollouts in flight after {args.wait_s:.0f} s; see {args.log}")
            os.killpg(launcher, signal.SIGKILL)
            return 1
        time.sleep(0.02)

    before = [procs[pid] for pid in descendants(procs, {launcher})]
    waited = time.monotonic() - started
    print(f"\nrollouts in flight after {waited:.1f} s, jailed REPL workers per rank: {by_rank}")
    for rp, r in sorted(ranks.items(), key=lambda x: x[1]):
        print(f"  rank {r} (pid {rp}) catches SIGTERM: {catches_sigterm(rp)}")
    print(f"process tree before the kill ({len(before)} processes):")
    print(listing(before, launcher, ranks, boot), flush=True)

    os.kill(target_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    print(f"\nSIGKILL -> {role(procs[target_pid], launcher, ranks)} (pid {target_pid})", flush=True)

    status = None
    while time.monotonic() - killed_at < args.exit_timeout_s:
        sample()
        if (status := proc.poll()) is not None:
            break
        time.sleep(0.05)
    exit_s = time.monotonic() - killed_at
    if status is None:
        print(f"launcher still running {args.exit_timeout_s:.0f} s after the kill")
    else:
        print(f"launcher exited with status {status} {exit_s:.1f} s after the kill")

    gone_at = None
    while time.monotonic() - killed_at < args.exit_timeout_s + args.grace_s:
        sample()
        left = [p for p in (alive(q) for q in seen.values()) if p is not None and p.state != "Z"]
        if not left and status is not None:
            gone_at = time.monotonic() - killed_at
            break
        if status is None:
            status = proc.poll()
        time.sleep(0.05)
    survivors = [p for p in (alive(q) for q in seen.values()) if p is not None]
    running = [p for p in survivors if p.state != "Z"]
    zombies = [p for p in survivors if p.state == "Z"]
    print(
        f"\nprocesses of the run seen in all: {len(seen)} ({sum(is_sandbox(p) for p in seen.values())} sandbox)"
    )
    print(f"left after the kill: {len(running)} running, {len(zombies)} zombie (dead, not yet reaped)")
    if survivors:
        print(listing(survivors, launcher, ranks, boot))
    if gone_at is not None:
        print(f"every process gone {gone_at:.1f} s after the kill")

    checks = {"nothing left running": not running}
    if args.target == "rank":
        checks["launcher exited non-zero in time"] = status is not None and status != 0
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    for p in running:  # ours: clean up after a failed check
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    verdict = all(checks.values())
    print(f"{'PASS' if verdict else 'FAIL'}: rank death (--target {args.target})", flush=True)
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
