"""Start-up self-test: start one worker, attack it a little, and state the isolation level it really has.

Each layer a worker reports is checked against a probe that the layer must stop (seccomp: exec, fork,
threads, sockets; landlock or bwrap: reading host files, writing outside the jail; any mode but unsafe-dev:
signalling the host). A layer that claims to hold but lets its probe through is an ``IsolationError``.
It complements, and does not replace, the hostile test suite.
"""

from __future__ import annotations

import json
import os
import tempfile

from fathom.sandbox.config import IsolationError, IsolationReport
from fathom.sandbox.host import Sandbox
from fathom.sandbox.launch import Launcher

PROBE = r"""
import json, os, socket, threading
def probe(fn):
    try:
        fn()
        return "allowed"
    except BaseException as e:
        return type(e).__name__
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
def write():
    with open(CANARY, "w") as f:
        f.write("escaped")
results = {
    "exec": probe(lambda: os.execv("/nonexistent/fathom-probe", ["x"])),
    "fork": probe(fork),
    "thread": probe(lambda: threading.Thread(target=len, args=("",)).start()),
    "socket": probe(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()),
    "read_host_file": probe(lambda: open("/etc/passwd").read()),
    "write_host_file": probe(write),
    "signal_host": probe(lambda: os.kill(HOST_PID, 0)),
}
print(json.dumps(results))
"""

# layer -> probes it must stop. Writing the host canary is judged on the host (inside bwrap, /tmp is private).
EXPECTED = {
    "seccomp": ("exec", "fork", "thread", "socket"),
    "landlock": ("read_host_file", "write_host_file"),
    "bwrap": ("read_host_file", "write_host_file", "signal_host"),
    "uid": ("signal_host",),
}


def _stopped(name: str, outcome: str) -> bool:
    # exec of a missing path fails with FileNotFoundError unless something stopped it before the lookup
    return outcome == "PermissionError" if name == "exec" else outcome != "allowed"


async def self_test(launcher: Launcher) -> IsolationReport:
    """Run the probes in a fresh worker from ``launcher``; return its report with the probe outcomes in info."""
    fd, canary = tempfile.mkstemp(prefix="fathom-sbx-selftest-")
    os.close(fd)
    os.unlink(canary)  # the probe must not be able to create it
    sandbox = Sandbox(launcher, launcher.spawn, None, (os.memfd_create("fathom-probe"), 0))
    try:
        await sandbox._begin(None)
        code = f"CANARY = {canary!r}\nHOST_PID = {os.getpid()}\n" + PROBE
        result = await sandbox.execute(code)
        report = sandbox.report
    finally:
        await sandbox.close()
    escaped_file = os.path.exists(canary)
    if escaped_file:
        os.unlink(canary)
    if result.error is not None:
        raise IsolationError(f"the sandbox self-test failed to run: {result.error}")
    probes = json.loads(result.stdout)
    probes["write_host_file"] = "allowed" if escaped_file else "blocked"
    failures = [
        f"{layer} is reported but {name} was allowed ({probes[name]})"
        for layer, names in EXPECTED.items()
        if layer in report.layers
        for name in names
        if not _stopped(name, probes[name])
    ]
    if failures:
        raise IsolationError("sandbox self-test: " + "; ".join(failures))
    return IsolationReport(report.mode, report.layers, report.missing, {**report.info, "probes": probes})
