"""The recipe's arithmetic: curriculum EMA and dwell, Lagrangian penalty, rank bonus, shaping, control file."""

from __future__ import annotations

import json

import pytest

from fathom.reward.config import RewardConfig
from fathom.train.config import CurriculumConfig, PenaltyConfig, TierConfig
from fathom.train.control import ControlFile, parse_control
from fathom.train.recipe import (
    RecipeState,
    Scored,
    average_ranks,
    curriculum_step,
    initial_state,
    penalty_step,
    rank_bonus,
    set_tier,
    shape_group,
    token_cost,
)

TIERS = (TierConfig("a"), TierConfig("b", lengths=(16384,)), TierConfig("c", lengths=(32768,)))


def test_curriculum_advances_only_after_dwell_and_threshold():
    cfg = CurriculumConfig(tiers=TIERS, ema_alpha=0.5, advance_threshold=0.6, min_dwell_steps=3)
    state = initial_state(cfg, PenaltyConfig(), 1.0)
    assert not curriculum_step(state, 1.0, cfg, step=1)  # EMA 1.0 but only 1 step in the tier
    assert state.ema == 1.0 and state.steps_in_tier == 1
    assert not curriculum_step(state, 0.0, cfg, step=2)  # EMA 0.5
    assert state.ema == 0.5
    assert not curriculum_step(state, 0.6, cfg, step=3)  # dwell reached, EMA 0.55 < 0.6
    assert state.ema == pytest.approx(0.55)
    assert curriculum_step(state, 1.0, cfg, step=4)  # EMA 0.775
    assert (state.tier, state.steps_in_tier, state.ema) == (1, 0, None)
    assert state.tier_history == [[0, 0], [4, 1]]
    set_tier(state, 2, step=5)  # manual override restarts dwell and EMA
    for step in range(6, 12):  # the last tier never advances
        assert not curriculum_step(state, 1.0, cfg, step)
    assert state.tier == 2
    assert RecipeState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_lagrangian_weight_rises_above_the_floor_falls_below_and_is_clipped():
    cfg = PenaltyConfig(init=0.1, lr=0.5, accuracy_floor=0.5, min=0.0, max=0.3)
    assert penalty_step(0.1, 0.7, cfg) == pytest.approx(0.2)  # accuracy above floor: squeeze tokens harder
    assert penalty_step(0.1, 0.3, cfg) == pytest.approx(0.0)  # below: relax
    assert penalty_step(0.25, 1.0, cfg) == 0.3 and penalty_step(0.05, 0.0, cfg) == 0.0
    assert penalty_step(0.1, 1.0, PenaltyConfig(enabled=False)) == 0.0


def test_rank_bonus_is_zero_mean_shortest_first_and_ties_averaged():
    assert average_ranks([30, 10, 20, 10]) == [4.0, 1.5, 3.0, 1.5]
    bonus = rank_bonus([30, 10, 20, 10], weight=0.3)
    assert sum(bonus) == pytest.approx(0.0)
    assert bonus[1] == bonus[3] == pytest.approx(0.3 * 1.0 / 1.5)  # ranks 1.5 of centre 2.5, half-width 1.5
    assert bonus[0] == pytest.approx(-0.3) and max(bonus) < 0.3
    assert rank_bonus([5], 0.3) == [0.0] and rank_bonus([], 0.3) == []
    assert rank_bonus([7, 7, 7], 0.3) == [0.0, 0.0, 0.0]


def test_shaping_penalises_correct_rollouts_only_and_replaces_the_fixed_token_bonus():
    reward = RewardConfig(free_tokens=100, token_budget=1100)
    assert (
        token_cost(100, reward) == 0.0 and token_cost(600, reward) == 0.5 and token_cost(5000, reward) == 1.0
    )
    group = [
        Scored(total=1.0, token_component=0.1, correct=True, score=1.0, model_tokens=600),
        Scored(total=0.9, token_component=0.0, correct=True, score=1.0, model_tokens=1100),
        Scored(total=0.05, token_component=0.0, correct=False, score=0.0, model_tokens=5000),
    ]
    cfg = PenaltyConfig(rank_bonus=0.1)
    shaped = shape_group(group, weight=0.2, penalty=cfg, reward=reward)
    assert shaped[0].penalty == pytest.approx(0.1) and shaped[1].penalty == pytest.approx(0.2)
    assert shaped[2].penalty == 0.0 and shaped[2].rank_bonus == 0.0  # wrong: neither penalty nor bonus
    assert shaped[0].rank_bonus == pytest.approx(0.1) and shaped[1].rank_bonus == pytest.approx(-0.1)
    assert shaped[0].reward == pytest.approx(1.0 - 0.1 - 0.1 + 0.1)
    assert shaped[1].reward == pytest.approx(0.9 - 0.2 - 0.1)
    assert shaped[2].reward == pytest.approx(0.05)
    off = shape_group(group, weight=0.2, penalty=PenaltyConfig(enabled=False), reward=reward)
    assert [s.reward for s in off] == [1.0, 0.9, 0.05]  # the environment's reward untouched
    # the largest penalty a config may set never sinks a correct answer below a wrong one
    assert min(s.reward for s in shape_group(group[:2], 0.3, PenaltyConfig(max=0.3), reward)) > 0.25


def test_control_file_applies_valid_content_once_and_reports_bad_content(tmp_path):
    path = tmp_path / "control.json"
    control = ControlFile(path, ["a", "b"], (0.0, 0.3))
    assert control.poll("") == (None, None)  # no file: nothing to do
    path.write_text(json.dumps({"temperature": 0.7, "tier": "b", "penalty_weight": 0.1}))
    update, error = control.poll("")
    assert error is None and update.changes() == {"temperature": 0.7, "penalty_weight": 0.1, "tier": 1}
    assert control.poll(update.digest) == (None, None)  # already applied (e.g. after a resume)
    for bad, why in [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"temp": 1}', "unknown key(s) ['temp']"),
        ('{"temperature": 0}', "temperature must be > 0"),
        ('{"temperature": "hot"}', "temperature must be a number"),
        ('{"penalty_weight": 0.9}', "penalty_weight must be in [0.0, 0.3]"),
        ('{"tier": 7}', "tier must be an index in 0..1"),
    ]:
        path.write_text(bad)
        update, error = control.poll("")
        assert update is None and why in error, bad
        assert control.poll("") == (None, None)  # reported once, not on every poll
    path.write_bytes(b"{" + b" " * 70_000 + b"}")
    assert "over 65536 bytes" in control.poll("")[1]
    assert parse_control('{"tier": 0}', ["a"], (0, 1))[0].tier == 0
