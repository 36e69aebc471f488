"""``python -m fathom.sandbox [--mode MODE ...]``: run the start-up self-test and print the isolation level.

Exits 1 when a mode cannot run at the default floor here (the reason is printed); never runs model code.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from fathom.sandbox.config import MODES, IsolationError, SandboxConfig
from fathom.sandbox.launch import Launcher
from fathom.sandbox.selftest import self_test


async def check(mode: str) -> bool:
    launcher = Launcher(
        SandboxConfig(
            isolation=mode, min_isolation=() if mode == "unsafe-dev" else SandboxConfig().min_isolation
        )
    )
    try:
        report = await self_test(launcher)
    except IsolationError as e:
        print(f"{mode}: cannot run here: {e}")
        return False
    finally:
        launcher.close()
    print(report.describe())
    print(f"  probes: {json.dumps(report.info.get('probes', {}))}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fathom.sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("--mode", action="append", choices=MODES, help="repeatable; default: auto")
    modes = parser.parse_args(argv).mode or ["auto"]
    return 0 if all([asyncio.run(check(m)) for m in modes]) else 1


if __name__ == "__main__":
    sys.exit(main())
