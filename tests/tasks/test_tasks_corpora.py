"""Corpora: cleaning rules, idempotent builds, and errors that name the command that fixes them."""

from __future__ import annotations

import random

import pytest

from fathom.cli import main
from fathom.tasks import CorpusMissingError, generate_task
from fathom.tasks import corpora as corpora_mod
from fathom.tasks.corpora import DEFAULT_CORPORA_DIR, SOURCE_NAMES, clean_paragraphs, is_built, read_manifest
from fathom.tasks.haystack import Corpora, insert_paragraphs, take


def test_built_corpora_are_clean_and_recorded(corpora):
    manifest = read_manifest(DEFAULT_CORPORA_DIR)
    assert set(manifest["sources"]) == set(SOURCE_NAMES) and is_built(DEFAULT_CORPORA_DIR)
    for name in SOURCE_NAMES:
        text = corpora.text(name)
        assert len(text) > 1_000_000
        assert "\n\n\n" not in text and "\t" not in text and " \n" not in text
        assert manifest["sources"][name]["paragraphs"] == text.count("\n\n") + 1


def test_corpora_command_is_idempotent_and_quick(corpora):
    before = {n: (DEFAULT_CORPORA_DIR / f"{n}.txt").stat().st_mtime_ns for n in SOURCE_NAMES}
    assert main(["data", "corpora", "--dir", str(DEFAULT_CORPORA_DIR)]) == 0
    after = {n: (DEFAULT_CORPORA_DIR / f"{n}.txt").stat().st_mtime_ns for n in SOURCE_NAMES}
    assert before == after


def test_missing_corpus_error_names_the_command(tmp_path):
    with pytest.raises(CorpusMissingError) as info:
        generate_task("niah", 0, 2048, "easy", tmp_path)
    message = str(info.value)
    assert "make corpora" in message and f"fathom data corpora --dir {tmp_path}" in message
    with pytest.raises(CorpusMissingError, match=r"apt-get install -y python3\.11-doc"):
        Corpora(tmp_path).text("pydoc")


def test_records_families_need_no_corpus(tmp_path):
    generate_task("oolong", 0, 2048, "easy", tmp_path)
    generate_task("pairs", 0, 2048, "easy", tmp_path)


def test_missing_debian_package_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(corpora_mod, "FORTUNES_DIR", tmp_path / "absent")
    with pytest.raises(CorpusMissingError, match="apt-get install -y fortunes"):
        list(corpora_mod.read_fortunes(tmp_path))


def test_clean_paragraphs_rules():
    raw = "Title\r\n\r\n\r\nline one  \n\tline\x07 two\n\n+---+---+\n| a | b |\n+---+---+\n\nB\x08Bold\n"
    assert clean_paragraphs(raw) == ["Title", "line one\n        line two", "Bold"]
    long = "\n".join(f"line {i} " + "x" * 90 for i in range(40))
    parts = clean_paragraphs(long)
    assert len(parts) > 1 and all(len(p) <= corpora_mod.MAX_PARAGRAPH_CHARS for p in parts)
    assert "\n".join(parts) == long


def test_take_and_insert_keep_sizes_and_order():
    text = "\n\n".join(f"paragraph {i} " + "word " * 20 for i in range(200))
    rng = random.Random(0)
    window = take(text, rng, 5000)
    assert 4800 <= len(window) <= 5000
    wrapped = take(text, random.Random(1), 3 * len(text))  # longer than the text: wraps around
    assert abs(len(wrapped) - 3 * len(text)) < 300
    needles = ["N1", "N2", "N3"]
    doc = insert_paragraphs(window, needles, [0.5, 0.5, 0.1])
    paragraphs = doc.split("\n\n")
    assert paragraphs.index("N3") < paragraphs.index("N1") == paragraphs.index("N2") - 1
    assert len(doc) == len(window) + sum(len(n) + 2 for n in needles)
