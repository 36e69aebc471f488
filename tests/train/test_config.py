"""Training config: TOML recipes, command-line overrides, unknown keys, round trip of the resolved config."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from fathom.train.cli import add_config_arguments, config_from_args
from fathom.train.config import ConfigError, TrainConfig
from fathom.train.configfile import dump_toml, load_config, parse_overrides

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.toml"))


def test_every_shipped_recipe_loads_and_round_trips(tmp_path):
    assert {p.name for p in CONFIGS} >= {"tiny-cpu.toml", "smollm2-135m-gpu.toml", "qwen2.5-coder-1.5b.toml"}
    for path in CONFIGS:
        config = load_config(path)
        saved = tmp_path / f"{path.stem}.resolved.toml"
        saved.write_text(dump_toml(config))
        assert load_config(saved) == config, path.name


def test_overrides_are_typed_and_win_over_the_file():
    config = load_config(
        CONFIGS[0].parent / "tiny-cpu.toml",
        [
            "--grpo.max_steps=7",
            "--model.name",
            "smollm2-135m",
            "--rollout.temperature=0.7",
            "--penalty.enabled=false",
        ],
    )
    assert (config.grpo.max_steps, config.model.name) == (7, "smollm2-135m")
    assert config.rollout.temperature == 0.7 and config.penalty.enabled is False
    tiers = load_config(None, ['--curriculum.tiers=[{name="a", lengths=[8192, 16384]}, {name="b"}]'])
    assert [t.name for t in tiers.curriculum.tiers] == ["a", "b"]
    assert tiers.curriculum.tiers[0].lengths == (8192, 16384)
    assert parse_overrides(["--a.b=[1, 2]", "--a.c", "x y"]) == {"a": {"b": [1, 2], "c": "x y"}}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["--grpo.max_stepz=3"], "unknown key(s) max_stepz in [grpo]; valid keys: max_steps"),
        (["--nosuch.key=1"], "unknown key(s) nosuch"),
        (["--grpo.max_steps=abc"], "grpo.max_steps must be an integer"),
        (["--grpo.max_steps=2.5"], "grpo.max_steps must be an integer"),
        (["--rollout.sub_lm=gpt"], "rollout.sub_lm must be one of"),
        (["--grpo.num_generations=3"], "must be a multiple of grpo.num_generations (3)"),
        (['--curriculum.tiers=[{name="a", families=["nope"]}]'], "unknown families ['nope']"),
        (["--reward.wrong_cap=0.9"], "[reward]: RewardConfig.wrong_cap"),
        (["--penalty.max=0.8"], "a correct but long answer could score below a wrong one"),
        (["--model.load_in_4bit=true", "--model.lora=false"], "needs model.lora = true"),
        (["--grpo.max_steps"], "has no value"),
        (["--run.gpu_memory_fraction=1.5"], "run.gpu_memory_fraction must be in [0, 1], got 1.5"),
        (["--rollout.repetition_penalty=0"], "rollout.repetition_penalty must be > 0"),
    ],
)
def test_bad_config_fails_fast_with_the_key_named(overrides, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert message in str(err.value)


def test_bad_toml_file_is_named(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[grpo\nmax_steps = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_every_key_is_a_flag_and_the_run_dir_defaults_per_command():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, default_run_dir="runs/sft")
    args = parser.parse_args(["--grpo.max_steps=3", "--eval.every", "5"])
    config = config_from_args(args)
    assert (config.grpo.max_steps, config.eval.every, config.run.run_dir) == (3, 5, "runs/sft")
    with pytest.raises(SystemExit):  # a misspelt key is an argparse error, before anything loads
        parser.parse_args(["--grpo.max_stepz=3"])
    assert TrainConfig().run.run_dir == ""


def test_print_config_shows_every_key_resolved(capsys):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, default_run_dir="runs/grpo")
    assert config_from_args(parser.parse_args(["--print-config", "--penalty.init=0.1"])) is None
    printed = capsys.readouterr().out
    assert (
        'run_dir = "runs/grpo"' in printed and "init = 0.1" in printed and "[[curriculum.tiers]]" in printed
    )


def test_vllm_generation_is_chosen_by_the_rollout_mode(monkeypatch):
    """vLLM (TRL's colocated engine) where asked for or, for "auto", on a GPU where it is installed; HF generate
    on a CPU; asking for vLLM where it cannot run is a config error naming why."""
    import importlib.util

    from fathom.train.grpo import vllm_arguments, wants_vllm

    def config(mode: str) -> TrainConfig:
        return load_config(None, [f"--rollout.generation_mode={mode}"])

    assert vllm_arguments(config("auto"), "cpu") == {"use_vllm": False}
    assert not wants_vllm(config("plain"), "cuda")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "vllm" else real_find_spec(name)
    )
    with pytest.raises(ConfigError, match="not installed"):
        wants_vllm(config("vllm"), "cuda")
    assert not wants_vllm(config("auto"), "cuda")  # no vLLM: HF generate, silently the CPU/tests path
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: object() if name == "vllm" else real_find_spec(name)
    )
    with pytest.raises(ConfigError, match="needs a GPU"):
        wants_vllm(config("vllm"), "cpu")
    args = vllm_arguments(config("auto"), "cuda")
    assert args["use_vllm"] and args["vllm_mode"] == "colocate" and args["vllm_max_model_length"] == 8192


def test_the_rollout_repetition_penalty_reaches_the_turns_sampling():
    from types import SimpleNamespace

    from fathom.models import ModelSpec, load_tokenizer
    from fathom.train.rollout_func import FathomRollout

    config = load_config(None, ["--rollout.repetition_penalty=1.1"])
    tokenizer = load_tokenizer(ModelSpec(name="tiny-smol"))
    rollout = FathomRollout(config, tokenizer, source=None, state=SimpleNamespace(temperature=1.0))
    assert rollout.sampling().repetition_penalty == 1.1 and rollout.sampling(0.0).repetition_penalty == 1.1
    assert load_config(None, []).rollout.repetition_penalty == 1.0  # off unless asked: GRPO stays on-policy
