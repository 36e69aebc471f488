"""Live steering of a running GRPO job through a JSON control file in its run directory.

Write, for example, ``{"temperature": 0.8, "penalty_weight": 0.1, "tier": "32k"}`` to ``RUN/control.json``
(any subset of the keys; ``tier`` is an index or a tier name). The trainer polls the file once per step and
applies a new content once: the digest of the last applied content is part of the checkpointed state, so a
resumed run does not apply the same file again.

A bad file (not JSON, not an object, an unknown key, a value out of range, over 64 KiB) is reported — the
returned error is logged and written to ``metrics.jsonl`` — and ignored as a whole; it is never fatal and
never half-applied. This module only reads and validates; the callback applies the changes.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_BYTES = 64 * 1024
KEYS = ("temperature", "penalty_weight", "tier")
MAX_TEMPERATURE = 5.0


@dataclass(frozen=True)
class ControlUpdate:
    digest: str
    temperature: float | None = None
    penalty_weight: float | None = None
    tier: int | None = None

    def changes(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KEYS if getattr(self, k) is not None}


def _number(data: dict[str, Any], key: str, lo: float, hi: float) -> float | None:
    if key not in data:
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{key} must be in [{lo}, {hi}], got {value}")
    return float(value)


def parse_control(
    text: str, tier_names: list[str], penalty_range: tuple[float, float]
) -> tuple[ControlUpdate | None, str | None]:
    """(update, None) for a valid control text, (None, why) for a bad one."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc}"
    if not isinstance(data, dict):
        return None, f"must be a JSON object, got {type(data).__name__}"
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        return None, f"unknown key(s) {unknown}; allowed: {', '.join(KEYS)}"
    try:
        temperature = _number(data, "temperature", 0.0, MAX_TEMPERATURE)
        if temperature == 0.0:
            raise ValueError("temperature must be > 0 for training rollouts (the loss divides by it)")
        weight = _number(data, "penalty_weight", *penalty_range)
    except ValueError as exc:
        return None, str(exc)
    tier = data.get("tier")
    if tier is not None:
        if isinstance(tier, str) and tier in tier_names:
            tier = tier_names.index(tier)
        elif isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier < len(tier_names):
            return (
                None,
                f"tier must be an index in 0..{len(tier_names) - 1} or one of {tier_names}, got {tier!r}",
            )
    return ControlUpdate(digest, temperature, weight, tier), None


class ControlFile:
    """Polls one control file; returns a new valid update once, or the reason a new content is bad once."""

    def __init__(self, path: str | Path, tier_names: list[str], penalty_range: tuple[float, float]) -> None:
        self.path, self.tier_names, self.penalty_range = Path(path), tier_names, penalty_range
        self._last_seen: str | None = None

    def poll(self, applied_digest: str) -> tuple[ControlUpdate | None, str | None]:
        """Check the file. `applied_digest`: the content already applied (from the recipe state)."""
        try:
            raw = self.path.read_bytes()[: MAX_BYTES + 1]
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, self._once(f"read-error:{exc}", f"cannot read {self.path}: {exc}")
        if len(raw) > MAX_BYTES:
            key = "too-big:" + hashlib.sha256(raw).hexdigest()
            return None, self._once(key, f"{self.path} is over {MAX_BYTES} bytes (ignored)")
        text = raw.decode("utf-8", errors="replace")
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if digest == applied_digest:
            return None, None
        update, error = parse_control(text, self.tier_names, self.penalty_range)
        if error is not None:
            return None, self._once(digest, f"{self.path}: {error} (ignored)")
        self._last_seen = digest
        return update, None

    def _once(self, key: str, message: str) -> str | None:
        """Report a given bad content once, not on every poll."""
        if key == self._last_seen:
            return None
        self._last_seen = key
        return message
