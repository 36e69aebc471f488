"""``rollout.train_subcalls`` through TRL's real GRPOTrainer, on CPU with the tiny model.

The tiny random model never writes code that calls ``llm()``, so `SubcallingRollout` runs the real episodes
and then has the policy itself answer two ``llm()`` requests per episode over its task's document: the sub-call
prompt is built by the engine's own `sub_prompt_ids`, the answer is sampled by the policy model being trained,
with the sampling a trained sub-call gets (the rollout temperature, ``sub_max_new_tokens``), and recorded as the
engine records it. What is under test is everything after that: the rows the trainer adds, their advantages and
masks, the loss normalisation, the gradient they carry, and a whole optimizer step.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fathom.env.sublm import SubLMRequest
from fathom.rollout.engine import sub_prompt_ids
from fathom.rollout.episode import SubCall
from fathom.train.configfile import load_config
from fathom.train.generation import policy_model
from fathom.train.grpo import build_grpo, train_run
from fathom.train.rollout_func import FathomRollout
from fathom.train.runlog import read_jsonl
from fathom.train.tasksource import slot_prompt

HERE = Path(__file__).parent
TINY = HERE.parents[1] / "configs" / "tiny-cpu.toml"
sys.path.insert(0, str(HERE))
from grpo_driver import FAST as DRIVER_FAST  # noqa: E402
from grpo_driver import token_logps, varied_reward  # noqa: E402

FAST = [*DRIVER_FAST, "--rollout.sub_max_new_tokens=8", "--rollout.train_subcalls=true"]
QUESTIONS = ("What is the key?", "Which value is named?")


class SubcallingRollout(FathomRollout):
    """The real rollout function, plus two `llm()` answers per episode sampled by the policy."""

    def run_episodes(self, trainer, tasks, sampling):
        episodes, stats = super().run_episodes(trainer, tasks, sampling)
        r = self.config.rollout
        sub = replace(sampling, max_new_tokens=r.sub_max_new_tokens)
        for task, episode in zip(tasks, episodes, strict=True):
            requests = [SubLMRequest(q, (task.document or "")[:300]) for q in QUESTIONS]
            prompts = [sub_prompt_ids(self.chat, q, r.sub_max_input_tokens) for q in requests]
            with policy_model(trainer):
                answers = self._backend.generate(prompts, sub)
            for q, p, gen in zip(requests, prompts, answers, strict=True):
                text = self.chat.turn_text(gen.ids)
                episode.subcalls.append(
                    SubCall(q.prompt, len(q.chunk), text, 1, p, list(gen.ids), gen.logprobs)
                )
        return episodes, stats


def build(tmp_path: Path, *extra: str, rewards=()):
    config = load_config(TINY, [*FAST, f"--run.run_dir={tmp_path}", "--grpo.max_steps=1", *extra])
    run = build_grpo(config, list(rewards))
    rollout = SubcallingRollout(
        config, run.rollout.tokenizer, run.rollout.source, run.recipe, run.rollout.traces
    )
    run.trainer.rollout_func = run.callback.rollout = run.rollout = rollout
    return run


def generate(run):
    trainer = run.trainer
    trainer.model.train()  # sub-call rows are added to training batches only
    inputs = [{"prompt": slot_prompt(0)} for _ in range(2)]
    return inputs, trainer._generate_and_score_completions(inputs)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    run = build(tmp_path_factory.mktemp("subcalls"))
    inputs, batch = generate(run)
    return run, inputs, batch


def test_the_batch_holds_one_row_per_kept_subcall_with_its_episodes_advantage(built):
    run, inputs, batch = built
    pad = run.trainer._tokenizer.pad_token_id
    # the cap defaults to the episode rows (2): each episode's first sub-call is kept, its second dropped
    assert batch["prompt_ids"].shape[0] == 4
    width_p, width_c = batch["prompt_ids"].size(1), batch["completion_ids"].size(1)
    for row, episode in ((2, 0), (3, 1)):
        call = inputs[episode]["fathom_subcalls"][0]
        assert call.prompt == QUESTIONS[0] and len(call.ids) > 0
        p, c = len(call.prompt_ids), len(call.ids)
        assert batch["prompt_ids"][row, width_p - p :].tolist() == call.prompt_ids  # left-padded
        assert batch["prompt_mask"][row].tolist() == [0] * (width_p - p) + [1] * p
        assert batch["completion_ids"][row, :c].tolist() == call.ids  # right-padded
        assert batch["completion_ids"][row, c:].eq(pad).all()
        assert batch["completion_mask"][row].tolist() == [1] * c + [0] * (width_c - c)
        assert batch["tool_mask"][row, :c].eq(1).all()
        assert batch["advantages"][row].item() == batch["advantages"][episode].item()
    # the episode rows keep their tokens (widened, never cut)
    for episode in range(2):
        ids = inputs[episode]["fathom_subcalls"]  # every episode got its two sub-calls
        assert [s.prompt for s in ids] == list(QUESTIONS)
    trained = batch["completion_mask"] * batch["tool_mask"]
    assert batch["num_items_in_batch"].item() == trained.sum().item()  # sub-call tokens are counted
    metrics = run.trainer._metrics["train"]
    assert metrics["subcalls/rows"][-1] == 2.0 and metrics["subcalls/dropped"][-1] == 2.0
    assert metrics["subcalls/tokens"][-1] == trained[2:].sum().item()


def test_only_the_subcall_rows_advantage_moves_the_adapter(built):
    run, _, batch = built
    trainer = run.trainer
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which we bypass here
    lora = [p for n, p in trainer.model.named_parameters() if p.requires_grad]
    with token_logps(trainer) as captured:

        def grads(advantages):
            trainer.model.zero_grad()
            trainer.compute_loss(trainer.model, {**batch, "advantages": torch.tensor(advantages)}).backward()
            return [p.grad.clone() for p in lora], captured["logps"].grad

        none, _ = grads([0.0, 0.0, 0.0, 0.0])
        subs, per_token = grads([0.0, 0.0, 1.0, -1.0])
    assert all(torch.count_nonzero(g) == 0 for g in none)
    assert any(torch.count_nonzero(g) > 0 for g in subs)  # the sub-call rows alone carry a gradient
    trained = (batch["completion_mask"] * batch["tool_mask"]).bool()
    assert torch.count_nonzero(per_token[:2]) == 0  # episode rows: advantage 0
    assert (per_token[2][trained[2]] < 0).all() and (per_token[3][trained[3]] > 0).all()  # the sign
    assert torch.count_nonzero(per_token[2:][~trained[2:]]) == 0  # padding is not trained


@pytest.mark.slow  # one optimizer step with the export: ~35 s on 2 shared cores
def test_a_whole_step_trains_and_logs_the_subcall_rows(tmp_path):
    run = build(tmp_path, "--rollout.max_subcall_rows=3", rewards=[varied_reward])
    before = {n: p.detach().clone() for n, p in run.trainer.model.named_parameters() if p.requires_grad}
    summary = train_run(run)
    assert summary["steps"] == 1
    after = dict(run.trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)  # (LoRA's B starts at 0)
    (row,) = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "loss" in r]
    assert row["subcalls/rows"] == 3.0 and row["subcalls/dropped"] == 1.0 and row["subcalls/tokens"] > 0


@pytest.mark.slow  # four episodes and eight rows: ~50 s on 2 shared cores
def test_old_logps_and_padding_rows_under_several_passes_and_accumulation(tmp_path):
    # two passes over each generation batch: TRL keeps old log-probs, and the sub-call rows need theirs;
    # two accumulation steps: the rows are cut in two chunks, so 3 sub-call rows get one padding row
    run = build(
        tmp_path,
        "--grpo.num_iterations=2",
        "--grpo.gradient_accumulation_steps=2",
        "--rollout.max_subcall_rows=3",
    )
    trainer = run.trainer
    trainer.model.train()
    inputs = [{"prompt": slot_prompt(i // 2)} for i in range(4)]
    batch = trainer._generate_and_score_completions(inputs)
    assert batch["prompt_ids"].shape[0] == 8  # 4 episodes + 3 sub-calls + 1 padding row
    assert batch["completion_mask"][7].sum() == 0 and batch["advantages"][7] == 0
    assert batch["prompt_mask"][7].sum() == 1  # one attended pad token: no all-masked row
    # round-robin under the cap: the first sub-call of episodes 0, 1, 2
    for row, episode in ((4, 0), (5, 1), (6, 2)):
        assert batch["advantages"][row] == batch["advantages"][episode]
    # old log-probs, every row (episode rows computed by TRL before the batch was widened, sub-call rows by
    # us after): the log-probs of the widened batch under the same weights
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        fresh, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, batch["completion_ids"].size(1), batch_size=2
        )
    trained = (batch["completion_mask"] * batch["tool_mask"]).bool()
    assert trained[4:7].any(dim=1).all()
    torch.testing.assert_close(batch["old_per_token_logps"][trained], fresh[trained], atol=1e-4, rtol=0)


@pytest.mark.slow  # a build, a generation and two backward passes: ~50 s on 2 shared cores
def test_gradient_checkpointing_gives_the_subcall_rows_the_same_gradient(tmp_path):
    # the GPU proof's trained-sub-calls run checkpoints activations (its widened rows ran out of memory):
    # recomputing the forward in the backward must not change what the rows train
    from trl.models.utils import disable_gradient_checkpointing

    run = build(tmp_path, "--model.gradient_checkpointing=true")
    trainer = run.trainer
    assert trainer.args.gradient_checkpointing  # the flag reaches TRL; HF's train() then enables it, as here:
    trainer.model.gradient_checkpointing_enable(trainer.args.gradient_checkpointing_kwargs)
    assert trainer.model.is_gradient_checkpointing
    _, batch = generate(run)
    assert batch["prompt_ids"].shape[0] == 4  # two episode rows and two sub-call rows
    trainer.current_gradient_accumulation_steps = 1
    batch = {**batch, "advantages": torch.tensor([0.5, -0.5, 1.0, -1.0])}
    lora = [p for p in trainer.model.parameters() if p.requires_grad]

    def grads():
        trainer.model.zero_grad()
        trainer.compute_loss(trainer.model, batch).backward()
        return [p.grad.clone() for p in lora]

    checkpointed = grads()
    with disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        assert not trainer.model.is_gradient_checkpointing
        plain = grads()
    assert trainer.model.is_gradient_checkpointing  # restored
    assert any(torch.count_nonzero(g) > 0 for g in plain)
    for a, b in zip(checkpointed, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
