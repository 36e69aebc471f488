"""A rank started by torchrun (``TORCHELASTIC_RUN_ID`` set) dies with its launcher; other processes do not.

The parent here plays the launcher: it starts a child that calls `die_with_launcher` and then sleeps, and is
SIGKILLed. Seen without it: ranks of a killed ``accelerate launch`` trained on as orphans (bench/rank_death.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fathom.sandbox.proctree import pid_alive

CHILD = "from fathom.train.launcher import die_with_launcher; import time; print(die_with_launcher(), flush=True); time.sleep(60)"
PARENT = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(60)
"""


def run_parent(env: dict[str, str]) -> tuple[int, str]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    pid, armed = parent.stdout.readline().split()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    return int(pid), armed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("launched", [True, False], ids=["under-torchrun", "plain"])
def test_a_rank_dies_with_its_launcher_and_only_a_rank(launched):
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}
    if launched:
        env["TORCHELASTIC_RUN_ID"] = "test"
    child, armed = run_parent(env)
    try:
        assert armed == str(launched)
        deadline = time.monotonic() + 10
        while pid_alive(child) and time.monotonic() < deadline and launched:
            time.sleep(0.02)
        assert pid_alive(child) is not launched
    finally:
        if pid_alive(child):
            os.kill(child, signal.SIGKILL)
