"""RewardConfig: defaults, validation, and loading from a dict (a TOML section)."""

import dataclasses

import pytest

from fathom.reward.config import RewardConfig


def test_defaults_are_the_documented_numbers():
    config = RewardConfig()
    assert (config.format_weight, config.correctness_weight) == (0.10, 0.70)
    assert (config.token_weight, config.recursion_weight) == (0.15, 0.15)
    assert config.wrong_cap == 0.25
    assert config.correct_threshold == 1.0
    assert (config.free_tokens, config.token_budget) == (1024, 8192)
    assert (config.free_calls, config.max_calls) == (0, 64)
    assert config.max_answer_chars == 4096
    assert config.max_total == pytest.approx(1.10)


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RewardConfig().wrong_cap = 0.9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"format_weight": -0.1}, "format_weight must be >= 0"),
        ({"token_weight": -1.0}, "token_weight must be >= 0"),
        ({"correctness_weight": 0.0}, "correctness_weight must be > 0"),
        ({"wrong_cap": 1.5}, r"wrong_cap must be in \[0, 1\]"),
        ({"wrong_cap": -0.1}, r"wrong_cap must be in \[0, 1\]"),
        ({"wrong_cap": 0.7}, "must be below the least a correct answer earns"),
        ({"correct_threshold": 0.0}, r"correct_threshold must be in \(0, 1\]"),
        ({"correct_threshold": 1.01}, r"correct_threshold must be in \(0, 1\]"),
        ({"token_budget": 1024}, r"token_budget \(1024\) must be greater than free_tokens \(1024\)"),
        ({"free_tokens": 9000}, "must be greater than free_tokens"),
        ({"max_calls": 0}, r"max_calls \(0\) must be greater than free_calls \(0\)"),
        ({"free_calls": -1}, "free_calls must be >= 0"),
        ({"max_answer_chars": 0}, "max_answer_chars must be >= 1"),
        ({"wrong_cap": float("nan")}, "wrong_cap must be finite"),
        ({"token_weight": float("inf")}, "token_weight must be finite"),
    ],
)
def test_invalid_values_raise(overrides, message):
    with pytest.raises(ValueError, match=message):
        RewardConfig(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [{"wrong_cap": "0.25"}, {"free_tokens": 1024.0}, {"format_weight": True}, {"max_calls": None}],
)
def test_wrong_types_raise(overrides):
    with pytest.raises(TypeError, match="must be"):
        RewardConfig(**overrides)


def test_wrong_cap_must_stay_below_least_correct_payout_with_lower_threshold():
    # 0.7 * 0.5 = 0.35: a cap of 0.3 is fine, 0.35 would let a wrong answer tie a correct one.
    assert RewardConfig(correct_threshold=0.5, wrong_cap=0.3).wrong_cap == 0.3
    with pytest.raises(ValueError, match="least a correct answer earns"):
        RewardConfig(correct_threshold=0.5, wrong_cap=0.35)


def test_from_dict_accepts_known_keys_and_ints_for_floats():
    config = RewardConfig.from_dict({"token_weight": 0, "max_calls": 128, "wrong_cap": 0.2})
    assert config.token_weight == 0
    assert config.max_calls == 128
    assert config.wrong_cap == 0.2
    assert config.format_weight == 0.10


def test_from_dict_rejects_unknown_keys_listing_valid_ones():
    with pytest.raises(ValueError) as err:
        RewardConfig.from_dict({"tokens_weight": 0.1, "wrong_cap": 0.2, "cap": 1})
    message = str(err.value)
    assert "unknown reward config key(s) cap, tokens_weight" in message
    assert "valid keys: format_weight, correctness_weight, token_weight, recursion_weight" in message


def test_to_dict_round_trips():
    config = RewardConfig(max_calls=100, token_weight=0.3)
    assert RewardConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["max_calls"] == 100
