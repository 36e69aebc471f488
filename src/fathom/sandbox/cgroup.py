"""Per-worker cgroups (memory, pids, cpu) where the host can write them: cgroup v1, or a delegated v2 subtree.

A ``CgroupRoot`` is one directory per controller that this host process owns (named with its pid, so a later
run can sweep what a crashed one left); each worker gets a ``Cgroup`` leaf under it with memory, pids and CPU
limits. This is the backstop for what rlimits miss (tmpfs pages, kernel memory) and gives CPU fairness.
It does not decide the limits (the launcher does) and does nothing when no writable hierarchy exists: the
caller records the layer as missing with the reason ``CgroupRoot.find`` gives.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass

CONTROLLERS = ("memory", "pids", "cpu")
PREFIX = "fathom-sbx-"


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fstype, super options) of every cgroup mount, from /proc/self/mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, (fstype, _source, options) = left.split(), right.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4], fstype, set(options.split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path; '' is the v2 (unified) path."""
    paths = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                paths[c] = path
    return paths


def _inside(mount_root: str, mount_point: str, path: str) -> str | None:
    if mount_root != "/" and not (path + "/").startswith(mount_root.rstrip("/") + "/"):
        return None
    rel = path[len(mount_root) :] if mount_root != "/" else path
    return os.path.join(mount_point, rel.lstrip("/"))


def _sweep(base: str) -> None:
    """Remove cgroups left by host processes that no longer exist."""
    for name in os.listdir(base):
        if not name.startswith(PREFIX):
            continue
        try:
            os.kill(int(name[len(PREFIX) :].split("-")[0]), 0)
            continue  # owner alive
        except ProcessLookupError:
            pass
        except (ValueError, PermissionError):
            continue
        stale = os.path.join(base, name)
        for child in os.listdir(stale):
            if os.path.isdir(os.path.join(stale, child)):
                _rmdir(os.path.join(stale, child))
        _rmdir(stale)


def _rmdir(path: str) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


@dataclass
class CgroupRoot:
    version: int
    dirs: dict[str, str]  # controller -> our parent directory (v2: the same directory for all)

    @classmethod
    def find(cls, tag: str) -> tuple[CgroupRoot | None, str]:
        """A writable root for this host process, or (None, why not)."""
        try:
            mounts, own = _mounts(), _own_paths()
        except OSError as e:
            return None, f"cannot read /proc cgroup info: {e}"
        dirs: dict[str, str] = {}
        for root, point, fstype, options in mounts:
            for c in CONTROLLERS:
                if fstype == "cgroup" and c in options and c in own and c not in dirs:
                    base = _inside(root, point, own[c])
                    made = base and cls._make(base, tag)
                    if made:
                        dirs[c] = made
        if "memory" in dirs and "pids" in dirs:
            return cls(1, dirs), ""
        for d in dirs.values():
            _rmdir(d)
        for root, point, fstype, _ in mounts:
            if fstype == "cgroup2" and "" in own:
                base = _inside(root, point, own[""])
                found = base and cls._make_v2(base, tag)
                if found:
                    return cls(2, dict.fromkeys(CONTROLLERS, found)), ""
        return None, "no writable cgroup hierarchy with memory and pids controllers"

    @staticmethod
    def _make(base: str, tag: str) -> str | None:
        path = os.path.join(base, f"{PREFIX}{os.getpid()}-{tag}")
        try:
            _sweep(base)
            os.mkdir(path)
        except OSError:
            return None
        return path

    @classmethod
    def _make_v2(cls, base: str, tag: str) -> str | None:
        try:
            with open(os.path.join(base, "cgroup.controllers")) as f:
                available = set(f.read().split())
            if not {"memory", "pids"} <= available:
                return None
            wanted = " ".join(f"+{c}" for c in CONTROLLERS if c in available)
            _write(os.path.join(base, "cgroup.subtree_control"), wanted)  # EBUSY unless delegated to us
        except OSError:
            return None
        path = cls._make(base, tag)
        if path is None:
            return None
        try:
            _write(os.path.join(path, "cgroup.subtree_control"), wanted)
        except OSError:
            _rmdir(path)
            return None
        return path

    def leaf(self, name: str) -> Cgroup:
        paths = {}
        for c, d in self.dirs.items():
            path = os.path.join(d, name)
            if path not in paths.values():
                os.makedirs(path, exist_ok=True)
            paths[c] = path
        return Cgroup(self.version, paths)

    def remove(self) -> None:
        for d in set(self.dirs.values()):
            for child in os.listdir(d) if os.path.isdir(d) else []:
                if os.path.isdir(os.path.join(d, child)):
                    _rmdir(os.path.join(d, child))
            _rmdir(d)


@dataclass
class Cgroup:
    """One worker's leaf: limits, attach, OOM check, removal."""

    version: int
    paths: dict[str, str]

    def limit(self, memory_bytes: int, pids: int, cpu_cores: float) -> None:
        period = 100_000
        quota = max(1_000, int(cpu_cores * period))
        if self.version == 1:
            _write(os.path.join(self.paths["memory"], "memory.limit_in_bytes"), str(memory_bytes))
            _write(os.path.join(self.paths["pids"], "pids.max"), str(pids))
            if "cpu" in self.paths and cpu_cores > 0:
                _write(os.path.join(self.paths["cpu"], "cpu.cfs_quota_us"), str(quota))
        else:
            path = self.paths["memory"]
            _write(os.path.join(path, "memory.max"), str(memory_bytes))
            if os.path.exists(os.path.join(path, "memory.swap.max")):
                _write(os.path.join(path, "memory.swap.max"), "0")
            _write(os.path.join(path, "pids.max"), str(pids))
            if os.path.exists(os.path.join(path, "cpu.max")) and cpu_cores > 0:
                _write(os.path.join(path, "cpu.max"), f"{quota} {period}")

    def set_memory(self, memory_bytes: int) -> None:
        name = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        _write(os.path.join(self.paths["memory"], name), str(memory_bytes))

    def attach(self, pids: list[int]) -> None:
        for path in dict.fromkeys(self.paths.values()):
            for pid in pids:
                _write(os.path.join(path, "cgroup.procs"), str(pid))

    def oom_killed(self) -> bool:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(os.path.join(self.paths["memory"], name)) as f:
                return any(line.split()[:1] == ["oom_kill"] and line.split()[1] != "0" for line in f)
        except OSError:
            return False

    def kill_all(self) -> None:
        for path in dict.fromkeys(self.paths.values()):
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    pids = [int(p) for p in f.read().split()]
            except OSError:
                continue
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """True when every directory is gone (a dying process can keep it busy for a moment)."""
        return all([_rmdir(p) for p in dict.fromkeys(self.paths.values())])
