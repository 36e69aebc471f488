"""Answer metrics: normalisation, exact match, numeric partial credit, set F1."""

import pytest

from fathom.reward.metrics import exact, normalize_text, numeric, parse_number, score, set_f1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Blue   Whale. ", "blue whale"),
        ("\uff14\uff12", "42"),  # fullwidth digits (NFKC)
        ("4\u200b2", "42"),  # zero-width space is a format character
        ("\u202eabc", "abc"),  # bidi override
        ("«Paris»", "paris"),
        ("STRASSE", "strasse"),
        ("Straße", "strasse"),  # casefold
        (42.0, "42"),
        (True, "true"),
        ("a\u00a0b", "a b"),  # no-break space collapses like a space
    ],
)
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("42", 42.0),
        ("-3.5", -3.5),
        ("1,234", 1234.0),
        ("\u221242", -42.0),  # U+2212 MINUS SIGN
        (7, 7.0),
        ("42 43", None),
        ("1e3", None),
        ("forty", None),
        (True, None),
        (float("nan"), None),
        (float("inf"), None),
        (10**400, None),  # beyond float range: model data, not a crash
        ("9" * 400, None),
    ],
)
def test_parse_number(raw, expected):
    assert parse_number(raw) == expected


def test_exact():
    assert exact("  PARIS ", "Paris") == 1.0
    assert exact("Paris, France", "Paris") == 0.0
    assert exact(["Paris"], "Paris") == 0.0
    assert exact(None, "None") == 0.0
    assert exact("", "") == 0.0  # an empty gold never matches


def test_numeric_partial_credit():
    assert numeric("37", 37) == 1.0
    assert numeric("38", 37) == pytest.approx(0.75)
    assert numeric(34, "37") == pytest.approx(0.75**3)
    assert numeric("37 or 38", 37) == 0.0
    assert numeric(10**400, 37) == 0.0
    with pytest.raises(ValueError, match="numeric gold"):
        numeric("3", "three")


def test_set_f1_scalars_and_text():
    assert set_f1(["a", "b"], ["b", "a"]) == 1.0
    assert set_f1("a, b\nc", ["a", "b"]) == pytest.approx(0.8)
    assert set_f1('["a", "b"]', ["a", "b"]) == 1.0
    assert set_f1(["a", "a", "A "], ["a", "b"]) == pytest.approx(2 / 3)  # duplicates count once
    assert set_f1([], ["a"]) == 0.0
    assert set_f1([], []) == 1.0


def test_set_f1_pairs_in_every_written_form():
    gold = [[1, 2], [3, 4]]
    assert set_f1([[2, 1], [3, 4]], gold) == 1.0
    assert set_f1("(1, 2)\n(4, 3)", gold) == 1.0
    assert set_f1(["(1, 2)", "[3, 4]"], gold) == 1.0
    assert set_f1('["(1, 2)", "(3, 4)"]', gold) == 1.0  # text pairs inside a JSON list
    assert set_f1("[[1, 2], [3, 4]]", gold) == 1.0
    assert set_f1([[1, 2], [1, 3], [1, 4], [3, 4]], gold) == pytest.approx(2 * 2 / (4 + 2))
    assert set_f1([[1, 2, 3, 4]], gold) == 0.0  # one "pair" naming every id matches nothing


def test_score_dispatch_and_errors():
    assert score("exact", "x", "X") == 1.0
    assert score("numeric", "2", 2) == 1.0
    assert score("set_f1", ["x"], ["x"]) == 1.0
    with pytest.raises(ValueError, match="unknown metric"):
        score("bleu", "x", "x")
    with pytest.raises(ValueError, match="set_f1 needs a list"):
        score("set_f1", "x", "x")
