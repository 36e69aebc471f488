"""Command-line plumbing shared by ``fathom sft``, ``fathom grpo`` and ``fathom smoke``.

Every config field becomes a flag ``--section.key VALUE`` (or ``--section.key=VALUE``), generated from the
dataclasses in `fathom.train.config`, so ``--help`` lists them all and a misspelt key is an argparse error.
Values are parsed as TOML values by `fathom.train.config.load_config`. This module only parses arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

from fathom.train.config import TrainConfig
from fathom.train.configfile import dump_toml, load_config

_DEST = "override__"


def add_config_arguments(parser: argparse.ArgumentParser, default_run_dir: str) -> None:
    parser.add_argument("--config", help="recipe TOML (configs/*.toml); defaults apply where it is silent")
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config (every key, as TOML) and exit"
    )
    parser.set_defaults(default_run_dir=default_run_dir)
    sections = typing.get_type_hints(TrainConfig)
    group = parser.add_argument_group("overrides (any config key; value parsed as TOML)")
    for section, cls in sections.items():
        for f in dataclasses.fields(cls):
            group.add_argument(
                f"--{section}.{f.name}",
                dest=f"{_DEST}{section}__{f.name}",
                metavar="V",
                default=None,
                help=argparse.SUPPRESS,
            )
    parser.epilog = (
        "Every config key is a flag: --section.key=value, e.g. --grpo.max_steps=2 --model.name=smollm2-135m "
        "--curriculum.tiers='[{name=\"8k\", lengths=[8192]}]'. Sections: " + ", ".join(sections) + "."
    )


def overrides_from_args(args: argparse.Namespace) -> list[str]:
    out = []
    for dest, value in vars(args).items():
        if dest.startswith(_DEST) and value is not None:
            section, key = dest[len(_DEST) :].split("__", 1)
            out.append(f"--{section}.{key}={value}")
    return out


def config_from_args(args: argparse.Namespace) -> TrainConfig | None:
    """The recipe file plus command-line overrides; the run dir defaults per command when neither sets it.
    None after ``--print-config`` has printed it: the command has nothing more to do."""
    config = load_config(args.config, overrides_from_args(args))
    if not config.run.run_dir:
        config = dataclasses.replace(
            config, run=dataclasses.replace(config.run, run_dir=args.default_run_dir)
        )
    if args.print_config:
        print(dump_toml(config), end="")
        return None
    return config
