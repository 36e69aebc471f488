"""One real `GRPOTrainer` step with `environment_factory=` FATHOM episodes, on a tiny Qwen2 model fitted
to call the `python` tool (examples/tiny_tool_model.py): in-process, and against a `fathom serve`
subprocess with a bearer token. TRL must parse the model's tool calls, the environment must run each
cell in a real sandbox over the document, `get_reward` must score each rollout (a cell that finds the
needle beats one that answers six of its digits), and the step must update the weights."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import torch
from server_support import server_process
from tiny_tool_model import SYSTEM, ToolModel, tool_model, tool_tokenizer

from fathom.integrations.trl import in_process_factory, remote_factory, trl_dataset
from fathom.tasks import Task

pytestmark = pytest.mark.slow
TOKEN = "grpo-test-token"
ROLLOUTS = 8


@pytest.fixture(scope="session")
def fitted(niah_tasks, tmp_path_factory) -> ToolModel:
    return tool_model(niah_tasks[0], tmp_path_factory.mktemp("tool-model"))


@contextlib.contextmanager
def one_step(model: ToolModel, dataset, factory, out) -> Iterator[tuple]:
    """Train one step; yield (trainer, changed parameter names); then end every episode, as TRL never
    does (left to the garbage collector, a remote one would outlive its server, a local one its test)."""
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    policy = AutoModelForCausalLM.from_pretrained(model.path, dtype=torch.float32)
    before = {name: p.detach().clone() for name, p in policy.named_parameters()}
    args = GRPOConfig(
        output_dir=str(out),
        max_steps=1,
        per_device_train_batch_size=ROLLOUTS,
        num_generations=ROLLOUTS,  # one group: every rollout answers the same task
        max_completion_length=192,  # tool call, tool result and closing turn fit
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        temperature=0.7,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=policy,
        processing_class=tool_tokenizer(model.path),
        args=args,
        train_dataset=dataset,
        environment_factory=factory,
    )
    try:
        trainer.train()
        changed = [name for name, p in policy.named_parameters() if not torch.equal(p, before[name])]
        yield trainer, changed
    finally:
        for env in getattr(trainer, "environments", None) or []:
            env.__exit__(None, None, None)


def check_step(trainer, changed: list[str], model: ToolModel, task: Task) -> None:
    logs = trainer.state.log_history[0]
    assert trainer.state.global_step == 1
    envs = trainer.environments
    assert len(envs) == ROLLOUTS
    # The prompt TRL rendered is the one fitted: reset returned the same first message.
    assert {e.observations[0].text for e in envs} == {model.first_message}
    cells_run = sum(len(e.observations) - 1 for e in envs)
    assert cells_run > 0 and logs["tools/call_frequency"] > 0
    assert logs["tools/call_frequency"] * ROLLOUTS >= cells_run  # TRL also counts calls that ran nothing
    assert logs["tools/failure_frequency"] == 0.0
    right, wrong = model.answers
    assert right == str(task.answer)
    rewards = [e.get_reward() for e in envs]
    answered = [
        (e.observations[-1].answer, r)
        for e, r in zip(envs, rewards, strict=True)
        if e.end_reason == "answered"
    ]
    answers = {a for a, _ in answered}
    assert {right, wrong} <= answers, f"the group should hold both sandbox answers, got {answers}"
    for env, reward in zip(envs, rewards, strict=True):
        assert reward == env.reward_breakdown["total"]
        assert env.reward_breakdown["correct"] == (env.observations[-1].answer == right)
    assert min(r for a, r in answered if a == right) > max(r for a, r in answered if a == wrong)
    assert logs["rewards/FathomEnv/mean"] == pytest.approx(sum(rewards) / ROLLOUTS, rel=1e-5)
    assert changed, "one GRPO step with rewards that differ must change the weights"


def test_grpo_step_in_process(fitted, niah_tasks, tmp_path):
    task = niah_tasks[0]
    dataset = trl_dataset([task], system=SYSTEM)
    with one_step(fitted, dataset, in_process_factory(tasks=[task]), tmp_path) as (trainer, changed):
        check_step(trainer, changed, fitted, task)


def test_grpo_step_against_fathom_serve(fitted, niah_tasks, task_file, tmp_path):
    task = niah_tasks[0]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    serve = ("--tasks", str(task_file), "--token-file", str(token_file), "--pool", "0")
    with server_process(*serve, log=tmp_path / "serve.log") as (_, url):
        factory = remote_factory(url, token=TOKEN, tasks=task_file)
        dataset = trl_dataset(task_file, system=SYSTEM).select([0])  # rows by id: the server reads the file
        assert dataset[0]["task_id"] == task.id
        with one_step(fitted, dataset, factory, tmp_path) as (trainer, changed):
            check_step(trainer, changed, fitted, task)
