"""Run logs: ``metrics.jsonl`` (one line per step and per event), ``traces.jsonl`` (every rollout, untruncated),
and the optional TensorBoard / Weights & Biases reporters.

Lines are JSON objects with a ``step`` key; they are flushed as written, so a killed run loses at most the
line being written. On resume, `truncate_after` drops the lines a killed run wrote after its last checkpoint,
so the resumed run continues the same curve without duplicate steps. Only the main process writes.

Reporters go through transformers' ``report_to``; they are checked here so a missing package fails at start
with the install command, and W&B defaults to offline mode (no network, ``wandb sync`` later). This module
computes no metrics.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import IO, Any

from fathom.train.config import LoggingConfig


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become None, tuples lists, unknown objects their str()."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class JsonlWriter:
    def __init__(self, path: str | Path, enabled: bool = True) -> None:
        self.path, self.enabled = Path(path), enabled
        self._file: IO[str] | None = None

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(_clean(record), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def truncate_after(path: str | Path, step: int) -> int:
    """Drop lines with ``step > step`` (and a torn last line); returns how many were dropped."""
    path = Path(path)
    if not path.exists():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the line a SIGKILL cut short
            dropped += 1
            continue
        if isinstance(record, dict) and record.get("step", 0) > step:
            dropped += 1
            continue
        kept.append(line)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
    os.replace(tmp, path)
    return dropped


def report_to(config: LoggingConfig, run_dir: Path) -> list[str]:
    """transformers ``report_to`` for the config; fails fast when a requested reporter is not installed."""
    targets = []
    if config.tensorboard:
        try:
            import tensorboard  # noqa: F401
        except ImportError as exc:
            raise RuntimeError(
                "logging.tensorboard = true needs TensorBoard: pip install tensorboard"
            ) from exc
        targets.append("tensorboard")
    if config.wandb and config.wandb_mode != "disabled":
        try:
            import wandb  # noqa: F401
        except ImportError as exc:
            raise RuntimeError("logging.wandb = true needs Weights & Biases: pip install wandb") from exc
        # Explicit settings beat the environment here on purpose: a recipe that says offline stays offline.
        os.environ["WANDB_MODE"] = config.wandb_mode
        os.environ["WANDB_PROJECT"] = config.wandb_project
        os.environ.setdefault("WANDB_DIR", str(run_dir))
        targets.append("wandb")
    return targets
