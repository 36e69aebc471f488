"""The hostile-client suite (`bench/hostile_server.py`, issue 17 items 4-7) against a real `fathom serve` on
loopback: every attack must be contained. Slow (about a minute): `make test-slow` runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from server_support import REPO


@pytest.mark.slow
def test_hostile_clients_are_contained():
    result = subprocess.run(
        [sys.executable, "bench/hostile_server.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(lines) == 8 and all(line.startswith("PASS") for line in lines), result.stdout
