"""Recipe files: TOML in, command-line overrides on top, the resolved config out.

`load_config(path, overrides)` reads a recipe (or starts from the defaults), applies ``--section.key=value``
overrides (the value is parsed as a TOML value, else kept as a string) and builds the frozen dataclasses of
`fathom.train.config`, checking every key and type: an unknown section or key, or a value of the wrong type,
raises `ConfigError` naming the valid ones. `dump_toml` writes the resolved config (saved in every run dir and
checkpoint) so that ``--config RUN/config.toml`` repeats a run. Nothing here knows what a key means.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fathom.train.config import ConfigError, TrainConfig


# ---- building from plain data -----------------------------------------------------------------------------
def _coerce(where: str, kind: Any, value: Any) -> Any:
    """`value` as the annotated type `kind`, or ConfigError. No silent conversions beyond int -> float."""
    origin = typing.get_origin(kind)
    if kind is bool:
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false; got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer; got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number; got {value!r}")
        return float(value)
    if kind is str:
        if isinstance(value, bool):  # `--grpo.bf16=true` parses as a TOML bool
            return str(value).lower()
        if isinstance(value, int | float):
            return str(value)
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string; got {value!r}")
        return value
    if origin is tuple:
        (item, _ellipsis) = typing.get_args(kind)
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list; got {value!r}")
        return tuple(_coerce(f"{where}[{i}]", item, v) for i, v in enumerate(value))
    if dataclasses.is_dataclass(kind):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table; got {value!r}")
        return build_dataclass(kind, value, where)
    raise TypeError(f"config field {where} has an unsupported type {kind}")  # programmer error


def build_dataclass(cls: type, values: Mapping[str, Any], where: str) -> Any:
    """`cls(**values)` with every key checked and every value coerced to its annotated type."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(values) - set(names))
    if unknown:
        what = f"in [{where}]" if where else "(sections)"
        raise ConfigError(f"unknown key(s) {', '.join(unknown)} {what}; valid keys: {', '.join(names)}")
    kwargs = {k: _coerce(f"{where}.{k}" if where else k, hints[k], v) for k, v in values.items()}
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:  # a section's own validation (RewardConfig raises ValueError)
        raise ConfigError(f"[{where}]: {exc}") from exc


def parse_value(raw: str) -> Any:
    """A command-line value: a TOML value if it parses as one (2, 0.5, true, [1, 2]), else the string."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_overrides(args: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``["--grpo.max_steps=2", "--model.name", "x"]`` -> ``{"grpo": {"max_steps": 2}, "model": {"name": "x"}}``."""
    out: dict[str, dict[str, Any]] = {}
    items = list(args)
    while items:
        arg = items.pop(0)
        if not arg.startswith("--") or "." not in arg.split("=", 1)[0]:
            raise ConfigError(f"unexpected argument {arg!r}: overrides look like --section.key=value")
        key, sep, raw = arg[2:].partition("=")
        if not sep:
            if not items:
                raise ConfigError(f"override {arg} has no value")
            raw = items.pop(0)
        section, _, name = key.partition(".")
        if not name or "." in name:
            raise ConfigError(f"override {arg!r} must name one section and one key: --section.key=value")
        out.setdefault(section, {})[name] = parse_value(raw)
    return out


def merge(base: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    merged = {k: dict(v) if isinstance(v, Mapping) else v for k, v in base.items()}
    for section, values in overrides.items():
        merged.setdefault(section, {})
        if not isinstance(merged[section], dict):
            raise ConfigError(f"[{section}] is not a table")
        merged[section].update(values)
    return merged


def config_from_dict(data: Mapping[str, Any]) -> TrainConfig:
    return build_dataclass(TrainConfig, data, "")


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Read a recipe TOML (or start from the defaults), apply ``--section.key=value`` overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (recipes live in configs/)")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    return config_from_dict(merge(data, parse_overrides(overrides)))


# ---- writing back ---------------------------------------------------------------------------------------
def to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def dump_toml(config: TrainConfig) -> str:
    """The resolved config as TOML that `load_config` reads back to an equal config."""
    lines: list[str] = ["# resolved FATHOM training config (written by the run; reload with --config)"]
    for section, values in to_dict(config).items():
        tables = {
            k: v for k, v in values.items() if isinstance(v, list | tuple) and v and isinstance(v[0], dict)
        }
        lines.append(f"\n[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if k not in tables]
        for key, rows in tables.items():
            for row in rows:
                lines.append(f"\n[[{section}.{key}]]")
                lines += [f"{k} = {_toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"
