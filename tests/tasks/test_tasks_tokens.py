"""Lengths: the fixed chars-per-token estimate against the real Qwen2.5 tokenizer, and a 1M-token task."""

from __future__ import annotations

import pytest

from fathom.tasks import FAMILIES, generate_task, validate_task
from fathom.tasks.haystack import CHARS_PER_TOKEN, estimate_tokens

LENGTH = 32768  # at 8K a window of unusual code can be ~20% off; the estimate is a rate, see haystack.py


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_estimate_within_15_percent_of_real_qwen_tokens(family, corpora, qwen_encoding):
    for seed in range(4):
        task = generate_task(family, seed, LENGTH, ("easy", "medium", "hard")[seed % 3], corpora)
        real = len(qwen_encoding.encode_ordinary(task.document))
        assert abs(real - LENGTH) / real < 0.15, (task.id, task.meta, real)


def test_estimate_tokens_uses_the_kind_rate():
    text = "x" * 4000
    assert estimate_tokens(text, "shakespeare") == round(4000 / CHARS_PER_TOKEN["shakespeare"])
    assert 900 < estimate_tokens(text) < 1100


@pytest.mark.parametrize("family", ["niah", "oolong"])
def test_a_one_million_token_task(family, corpora):
    length = 1 << 20
    task = generate_task(family, 1, length, "hard", corpora)
    kind = task.meta.get("source", "records")
    estimated = estimate_tokens(task.document, kind)
    assert abs(estimated - length) / length < 0.01
    validate_task(task)
