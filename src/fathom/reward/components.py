"""Reward components: pure functions ``(task, outcome, config) -> float``, each in [0, 1], unweighted.

- `answer_format`        1.0 when a submitted answer is well-formed for the task's metric, else 0.0.
- `correctness`          the task metric's score (`fathom.reward.metrics.score`) of a submitted answer.
- `token_budget`         1.0 up to ``free_tokens`` policy tokens, falling linearly to 0.0 at ``token_budget``.
- `recursion_efficiency` 1.0 up to ``free_calls`` ``llm()`` calls, falling linearly to 0.0 at ``max_calls``.

"Well-formed" never looks at the gold, so it cannot leak correctness: the answer was submitted, fits in
``max_answer_chars`` (measured as the string, or as JSON for other values), is not empty after
normalisation, and has the shape its metric reads — a scalar for ``exact``, exactly one number for
``numeric``, a string or a flat list of scalars or pairs for ``set_f1``. An oversized or unmeasurable
answer (not JSON-encodable, nested past the recursion limit, an int too long to print) also gets
correctness 0 without reaching the metric, which keeps the verifier's work bounded on model data.

These functions neither weigh components nor decide which are paid; `fathom.reward.compose` does.
No I/O, no state.
"""

from __future__ import annotations

import json
from typing import Any

from fathom.reward.config import RewardConfig
from fathom.reward.metrics import normalize_text, parse_number, score
from fathom.reward.outcome import EpisodeOutcome, GradedTask

_SCALARS = (str, int, float, bool)


def answer_chars(answer: Any, limit: int) -> int | None:
    """Length of the answer as text (JSON for non-strings), or None if it is over `limit` or unencodable."""
    if isinstance(answer, str):
        return len(answer) if len(answer) <= limit else None
    # Every container item costs at least one character, so a long container is over without encoding it.
    if isinstance(answer, list | tuple | dict) and len(answer) > limit:
        return None
    try:
        text = json.dumps(answer, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        # TypeError: not a JSON value; ValueError: circular, or an int past Python's digit limit.
        return None
    return len(text) if len(text) <= limit else None


def _gradable(outcome: EpisodeOutcome, config: RewardConfig) -> bool:
    """Submitted, present and within the size limit: the verifier may look at it."""
    return (
        outcome.answered
        and outcome.answer is not None
        and answer_chars(outcome.answer, config.max_answer_chars) is not None
    )


def _is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALARS)


def _well_formed_set(answer: Any) -> bool:
    if isinstance(answer, str):
        return bool(normalize_text(answer))
    if not isinstance(answer, list | tuple) or not answer:
        return False
    for item in answer:
        if isinstance(item, list | tuple):
            if not item or not all(_is_scalar(x) for x in item):
                return False
        elif not _is_scalar(item):
            return False
    return any(
        normalize_text(x) for item in answer for x in (item if isinstance(item, list | tuple) else [item])
    )


def answer_format(task: GradedTask, outcome: EpisodeOutcome, config: RewardConfig) -> float:
    """1.0 if the submitted answer has the shape the task's metric reads, else 0.0 (never reads the gold)."""
    if not _gradable(outcome, config):
        return 0.0
    answer = outcome.answer
    if task.metric == "exact":
        return 1.0 if _is_scalar(answer) and normalize_text(answer) else 0.0
    if task.metric == "numeric":
        return 1.0 if _is_scalar(answer) and parse_number(answer) is not None else 0.0
    if task.metric == "set_f1":
        return 1.0 if _well_formed_set(answer) else 0.0
    raise ValueError(f"unknown metric {task.metric!r}")


def correctness(task: GradedTask, outcome: EpisodeOutcome, config: RewardConfig) -> float:
    """The metric's score in [0, 1] for a submitted answer; 0.0 if none was submitted or it is oversized."""
    if not _gradable(outcome, config):
        return 0.0
    return score(task.metric, outcome.answer, task.answer)


def _linear_decay(used: int, free: int, limit: int) -> float:
    """1.0 up to `free`, then linear down to 0.0 at `limit` and beyond."""
    if used <= free:
        return 1.0
    if used >= limit:
        return 0.0
    return 1.0 - (used - free) / (limit - free)


def token_budget(task: GradedTask, outcome: EpisodeOutcome, config: RewardConfig) -> float:
    """Token-efficiency value in [0, 1] from the policy tokens the episode spent."""
    return _linear_decay(outcome.tokens, config.free_tokens, config.token_budget)


def recursion_efficiency(task: GradedTask, outcome: EpisodeOutcome, config: RewardConfig) -> float:
    """Sub-call efficiency value in [0, 1] from the ``llm()`` calls the episode made."""
    return _linear_decay(outcome.llm_calls, config.free_calls, config.max_calls)
