"""The `fathom` command line: one subcommand per pipeline stage.

Each stage lives in its own module exposing ``register(subparsers)``; that function adds its parser and
sets ``func`` (called with the parsed args, returning an exit status). Modules are imported lazily so that
``fathom data ...`` never pays for importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> module that registers it
COMMANDS: dict[str, str] = {
    "data": "fathom.tasks.cli",
    "serve": "fathom.server.cli",
    "demo": "fathom.server.demo_cli",
    "eval": "fathom.eval.cli",
    "report": "fathom.report.cli",
    "sft": "fathom.train.sft",
    "grpo": "fathom.train.grpo",
    "smoke": "fathom.train.smoke",
    "quickstart": "fathom.quickstart",
    "serve-lm": "fathom.server.lm_server",
    "export": "fathom.publish.export",
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fathom", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, module in COMMANDS.items():
        if wanted in (None, name) or wanted not in COMMANDS:
            importlib.import_module(module).register(sub)
        else:  # still list it in --help without importing it
            sub.add_parser(name, help=f"see `fathom {name} --help`")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    return int(args.func(args) or 0)
