"""Dynamic sampling: which groups are kept, and `FathomRollout` with it on over a real engine.

The rollout test plays the policy with a scripted backend through the real engine, environment and sandboxes;
only the trainer is a stand-in (with `run_episodes` scripted, `__call__` reads nothing from it but the step
number). The script answers every task in one turn; on the tasks the test names "varied" it alternates right
and wrong answers, so exactly those groups have reward variance.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from transformers import AutoTokenizer

from fathom.models import tiny_model_dir
from fathom.policies.scripted import ScriptedBackend
from fathom.rollout.wiring import build_engine, hf_service
from fathom.train.config import ConfigError, GRPOSection
from fathom.train.configfile import load_config
from fathom.train.recipe import initial_state
from fathom.train.rollout_func import FathomRollout, extra_slots, has_variance, select_groups
from fathom.train.runlog import JsonlWriter
from fathom.train.tasksource import TaskSource, slot_prompt

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
G = 2  # rollouts per group in these tests


# ---- the pure parts ----------------------------------------------------------------------------------------
def test_select_groups_prefers_own_then_extra_groups_with_variance():
    variance = [False, True, False, True, True, False, True, True]  # 4 own groups, then 4 extra
    assert select_groups(variance, 4) == [1, 3, 4, 6]
    assert select_groups(variance, 4) == select_groups(list(variance), 4)  # a pure function of its input
    assert select_groups([True] * 3 + [False] * 3, 3) == [0, 1, 2]  # every own group varies: the extras go


def test_select_groups_fills_with_zero_variance_groups_own_first():
    variance = [False, False, True, False, False, True]  # 3 own, 3 extra; two groups vary in all
    kept = select_groups(variance, 3)
    assert kept == [2, 5, 0] and len(kept) == 3
    assert select_groups([False] * 4, 2) == [0, 1]  # nothing varies: the step's own groups, as without it


def test_select_groups_refuses_an_impossible_keep():
    with pytest.raises(ValueError, match="cannot keep 3 of 2"):
        select_groups([True, False], 3)
    with pytest.raises(ValueError, match="cannot keep 0"):
        select_groups([True], 0)


def test_has_variance_matches_the_zero_std_rule():
    assert has_variance([0.0, 1.0]) and has_variance([0.5, 0.5, 0.50001])
    assert not has_variance([0.3, 0.3]) and not has_variance([0.3, 0.3 + 1e-12]) and not has_variance([1.0])


def test_extra_slots_are_fresh_deterministic_and_sized_by_oversample():
    assert extra_slots([3, 7], 2.0) == [-(3 * 8 + 1), -(7 * 8 + 1)]
    assert extra_slots([3, 7], 2.5) == [-25, -57, -26]  # ceil(2.5 * 2) = 5 groups: 3 extra
    assert len(extra_slots(list(range(10)), 1.1)) == 1  # 11 groups in all, not 12 (1.1 * 10 in floats)
    many = extra_slots(list(range(50)), 8.0)
    assert len(many) == 350 and len(set(many)) == 350 and max(many) < 0  # never a dataset slot, never twice


def test_config_validates_dynamic_sampling_and_log_kl():
    with pytest.raises(ConfigError, match=r"grpo.oversample must be in \[1, 8\]"):
        GRPOSection(dynamic_sampling=True, oversample=0.5)
    with pytest.raises(ConfigError, match=r"grpo\.oversample must be in"):
        GRPOSection(oversample=9.0)
    with pytest.raises(ConfigError, match=r"needs grpo\.oversample > 1"):
        GRPOSection(dynamic_sampling=True, oversample=1.0)
    with pytest.raises(ConfigError, match=r"with grpo\.beta > 0 TRL already logs kl"):
        GRPOSection(log_kl=True, beta=0.1)
    assert GRPOSection(dynamic_sampling=True, oversample=1.5).oversample == 1.5


# ---- FathomRollout with dynamic sampling on ----------------------------------------------------------------
class ScriptedRollout(FathomRollout):
    """FathomRollout whose policy is a script: right/wrong alternately on `varied` questions, else wrong."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.varied: set[str] = set()

    def run_episodes(self, trainer, tasks, sampling):
        seen: Counter[str] = Counter()
        by_question = {t.question: t for t in tasks}

        def reply(conversation: str) -> str:
            task = next(t for q, t in by_question.items() if q in conversation)
            seen[task.question] += 1
            right = task.question in self.varied and seen[task.question] % 2 == 1
            answer = task.answer if right else "no such value"
            return f"I answer now.\n```repl\nFINAL({answer!r})\n```"

        service = hf_service(ScriptedBackend(self.chat, reply))
        engine = build_engine(service, self.chat, self.engine_config, None, reward=self.config.reward)
        return engine.run_sync(list(tasks), sampling), service.stats


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(tiny_model_dir("tiny-smol"))


def rollout_for(tmp_path, tokenizer, oversample="2.0"):
    config = load_config(
        TINY,
        [
            "--grpo.dynamic_sampling=true",
            f"--grpo.oversample={oversample}",
            f"--grpo.num_generations={G}",
            "--grpo.per_device_train_batch_size=6",  # 3 groups of 2 per step
            "--rollout.max_turns=1",
            "--rollout.max_new_tokens=128",
        ],
    )
    source = TaskSource(config.curriculum.tiers, config.run.seed)
    state = initial_state(config.curriculum, config.penalty, config.rollout.temperature)
    traces = JsonlWriter(tmp_path / "traces.jsonl")
    return ScriptedRollout(config, tokenizer, source, state, traces), source, traces


def run_step(rollout, slots, step=0):
    prompts = [slot_prompt(s) for s in slots for _ in range(G)]
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=step))
    return rollout(prompts, trainer)


def test_rollout_keeps_extra_groups_with_variance_and_traces_the_dropped(tmp_path, tokenizer):
    rollout, source, traces = rollout_for(tmp_path, tokenizer)
    own = [10, 11, 12]
    extras = extra_slots(own, 2.0)
    assert len(extras) == 3
    # two extra groups vary, the step's own groups do not: those two are kept, one own group fills the batch
    rollout.varied = {source.task(0, 1, s).question for s in extras[:2]}
    out = run_step(rollout, own)
    traces.close()

    assert len(out["prompt_ids"]) == len(out["fathom_reward"]) == len(out["fathom_info"]) == 3 * G
    rewards = out["fathom_reward"]
    groups = [rewards[i : i + G] for i in range(0, len(rewards), G)]
    assert [has_variance(g) for g in groups] == [True, True, False]
    questions = [tokenizer.decode(ids) for ids in out["prompt_ids"][::G]]
    for q_text, slot in zip(questions, [extras[0], extras[1], own[0]], strict=True):
        assert source.task(0, 1, slot).question in q_text  # rows are the kept groups' own episodes
    info = out["fathom_info"][0]
    assert info["dynamic/zero_std_sampled"] == pytest.approx(4 / 6)
    assert info["dynamic/zero_std_kept"] == pytest.approx(1 / 3)
    assert info["dynamic/groups_sampled"] == 6.0
    assert info["dynamic/accuracy_sampled"] == pytest.approx(2 / 12)  # one right answer in each varied group
    assert all(i["dynamic/zero_std_sampled"] == info["dynamic/zero_std_sampled"] for i in out["fathom_info"])
    # accuracy by family and by tier, on exactly the rollouts of that family / tier
    tier = rollout.source.tiers[0].name
    assert sum(f"accuracy/tier/{tier}" in i for i in out["fathom_info"]) == 3 * G
    for i in out["fathom_info"]:
        family_keys = [k for k in i if k.startswith("accuracy/family/")]
        assert len(family_keys) == 1 and i[family_keys[0]] == i["accuracy"]

    rows = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    assert len(rows) == 6 * G  # every sampled episode, kept or not
    kept = Counter((r["group"], r["kept"]) for r in rows)
    assert kept == {(0, True): G, (1, False): G, (2, False): G, (3, True): G, (4, True): G, (5, False): G}
    # the recipe's sums cover every sampled rollout; the trained rollouts are the kept ones
    stats = rollout.take_stats()
    assert stats.rollouts == 3 * G and stats.scored == 6 * G and stats.correct_sum == 2
    # one turn per episode and no llm() calls: between one batched call for all 12 turns and one each
    assert 1 <= stats.engine_calls <= 6 * G and stats.generate_s > 0


def test_rollout_is_deterministic_and_fills_when_nothing_varies(tmp_path, tokenizer):
    rollout, source, traces = rollout_for(tmp_path, tokenizer, oversample="1.5")
    out = run_step(rollout, [4, 5], step=6)
    again = run_step(rollout, [4, 5], step=6)
    traces.close()
    assert out["prompt_ids"] == again["prompt_ids"] and out["fathom_reward"] == again["fathom_reward"]
    assert len(out["prompt_ids"]) == 2 * G
    info = out["fathom_info"][0]
    assert info["dynamic/zero_std_sampled"] == info["dynamic/zero_std_kept"] == 1.0
    assert info["dynamic/groups_sampled"] == 3.0  # ceil(1.5 * 2)
    # nothing varies: the step's own two groups are trained on, as without dynamic sampling
    for ids, slot in zip(out["prompt_ids"][::G], [4, 5], strict=True):
        assert source.task(0, 7, slot).question in tokenizer.decode(ids)
