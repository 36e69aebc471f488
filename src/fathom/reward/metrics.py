"""Answer verifiers: how a predicted answer is scored against a task's gold answer.

Every task names one metric. `score(metric, prediction, gold)` returns a float in [0, 1]:

- ``exact``   normalised exact match (1.0 or 0.0).
- ``numeric`` partial credit ``0.75 ** |pred - gold|`` (the OOLONG rule); the prediction must be one
  number, so listing several numbers scores 0.
- ``set_f1``  F1 between the predicted and gold sets; items may be scalars or pairs (order inside a
  pair does not matter, duplicates count once).

Normalisation is deliberately narrow: Unicode NFKC, invisible format characters removed, case folded,
whitespace collapsed, and surrounding quotes/brackets/punctuation trimmed. It never strips words or
looks for the gold inside a longer answer, so padding an answer with candidates cannot pay.

This module does not weigh components or decide the reward; see `fathom.reward.compose`.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

METRICS = ("exact", "numeric", "set_f1")

_EDGE = " \t\n\r.,;:!?\"'`()[]{}<>«»“”‘’"
_NUMBER = re.compile(r"^[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?$")
_PAIR = re.compile(r"[(\[]\s*([^,()\[\]]+?)\s*,\s*([^,()\[\]]+?)\s*[)\]]")


def normalize_text(value: Any) -> str:
    """Canonical form of one scalar answer, used by every metric."""
    text = value if isinstance(value, str) else _scalar_to_str(value)
    text = unicodedata.normalize("NFKC", text)
    # Cf = format characters (zero-width joiners, bidi overrides, soft hyphens): invisible, never content.
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    text = " ".join(text.casefold().split())
    return text.strip(_EDGE)


def _scalar_to_str(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def parse_number(value: Any) -> float | None:
    """The single number an answer states, or None if it states zero or several."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range is model data, not a crash
            return None
        return number if math.isfinite(number) else None
    # NFKC leaves U+2212 MINUS SIGN alone; models print it for negative numbers.
    text = normalize_text(value).replace("\u2212", "-")
    if not _NUMBER.match(text):
        return None
    number = float(text.replace(",", ""))
    return number if math.isfinite(number) else None


def exact(prediction: Any, gold: Any) -> float:
    if isinstance(prediction, list | tuple | dict) or prediction is None:
        return 0.0
    return 1.0 if normalize_text(prediction) == normalize_text(gold) and normalize_text(gold) else 0.0


def numeric(prediction: Any, gold: Any) -> float:
    pred, target = parse_number(prediction), parse_number(gold)
    if target is None:
        raise ValueError(f"numeric metric needs a numeric gold answer, got {gold!r}")
    if pred is None:
        return 0.0
    return 0.75 ** abs(pred - target)


def _item_key(item: Any) -> str | tuple[str, ...]:
    if isinstance(item, list | tuple):
        return tuple(sorted(normalize_text(x) for x in item))
    return normalize_text(item)


def _split_items(prediction: Any, pairs: bool) -> list[Any]:
    if isinstance(prediction, list | tuple):
        return list(prediction)
    if prediction is None or isinstance(prediction, dict):
        return []
    text = str(prediction)
    try:  # a model may return the list as JSON text
        loaded = json.loads(text)
        if isinstance(loaded, list):
            return loaded
    except ValueError:
        pass
    if pairs:
        return [list(m) for m in _PAIR.findall(text)]
    return [part for part in re.split(r"[\n,;]+", text) if part.strip()]


def _text_pair(item: Any) -> Any:
    """The first "(a, b)" / "[a, b]" pair written in a text item, or the item unchanged."""
    found = _PAIR.findall(item) if isinstance(item, str) else []
    return list(found[0]) if found else item


def set_f1(prediction: Any, gold: Iterable[Any]) -> float:
    gold_items = list(gold)
    pairs = any(isinstance(g, list | tuple) for g in gold_items)
    pred_items = _split_items(prediction, pairs)
    if pairs:
        # Items given as text "(a, b)" inside a list (or a JSON list) are parsed like the plain-text form.
        pred_items = [item if isinstance(item, list | tuple) else _text_pair(item) for item in pred_items]
    gold_set = {_item_key(g) for g in gold_items} - {""}
    pred_set = {_item_key(p) for p in pred_items} - {""}
    if not gold_set:
        return 1.0 if not pred_set else 0.0
    hits = len(gold_set & pred_set)
    if hits == 0:
        return 0.0
    precision, recall = hits / len(pred_set), hits / len(gold_set)
    return 2 * precision * recall / (precision + recall)


def score(metric: str, prediction: Any, gold: Any) -> float:
    """Score `prediction` against `gold` with the named metric; always in [0, 1]."""
    if metric == "exact":
        return exact(prediction, gold)
    if metric == "numeric":
        return numeric(prediction, gold)
    if metric == "set_f1":
        if not isinstance(gold, list | tuple):
            raise ValueError(f"set_f1 needs a list as gold answer, got {type(gold).__name__}")
        return set_f1(prediction, gold)
    raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
