"""One real `GRPOTrainer` step with `environment_factory=` FATHOM episodes, on a tiny Qwen2 model that
calls the `python` tool: in-process, and against a `fathom serve` subprocess with a bearer token. The
trainer must parse the tool calls, run them in the sandbox, score each rollout through `get_reward`,
and update the weights."""

from __future__ import annotations

import os

import pytest
import torch
from server_support import server_process
from tool_model import SYSTEM, build_tool_model, wrong_answer

from fathom.integrations.trl import in_process_factory, remote_factory, trl_dataset

pytestmark = pytest.mark.slow
TOKEN = "grpo-test-token"


@pytest.fixture(scope="module")
def tool_model(niah_tasks, tmp_path_factory):
    return build_tool_model(niah_tasks[0], tmp_path_factory.mktemp("tool-model"))


def one_step(model_dir, dataset, factory, out):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    args = GRPOConfig(
        output_dir=str(out),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=128,
        max_tool_calling_iterations=2,
        learning_rate=1e-3,
        temperature=1.0,
        use_cpu=True,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        args=args,
        train_dataset=dataset,
        environment_factory=factory,
    )
    trainer.train()
    changed = [name for name, p in model.named_parameters() if not torch.equal(p, before[name])]
    return trainer, changed


def check_step(trainer, changed, task):
    logs = trainer.state.log_history[0]
    assert trainer.state.global_step == 1
    assert logs["tools/call_frequency"] >= 1.0 and logs["tools/failure_frequency"] == 0.0
    envs = trainer.environments
    assert len(envs) == 4
    answers = {e.observations[1].answer for e in envs}
    assert answers <= {str(task.answer), wrong_answer(str(task.answer))}
    assert len(answers) == 2, "the sampled group should hold both answers (seeded sampling)"
    for env in envs:
        assert env.end_reason == "answered"
        breakdown = env.reward_breakdown
        if env.observations[1].answer == str(task.answer):
            assert breakdown["correct"] and breakdown["total"] >= 0.8
        else:
            assert not breakdown["correct"] and breakdown["total"] <= 0.25
    mean = sum(e.reward_breakdown["total"] for e in envs) / len(envs)
    assert logs["rewards/FathomEnv/mean"] == pytest.approx(mean, rel=1e-5)
    assert changed, "one GRPO step with rewards that differ must change the weights"


def test_grpo_step_in_process(tool_model, niah_tasks, tmp_path):
    task = niah_tasks[0]
    dataset = trl_dataset([task], system=SYSTEM)
    trainer, changed = one_step(tool_model, dataset, in_process_factory(tasks=[task]), tmp_path)
    check_step(trainer, changed, task)


def test_grpo_step_against_fathom_serve(tool_model, niah_tasks, task_file, tmp_path):
    task = niah_tasks[0]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    serve = ("--tasks", str(task_file), "--token-file", str(token_file), "--pool", "0")
    with server_process(*serve, log=tmp_path / "serve.log") as (_, url):
        factory = remote_factory(url, token=TOKEN, tasks=task_file)
        trainer, changed = one_step(
            tool_model, trl_dataset(task_file, system=SYSTEM).select([0]), factory, tmp_path
        )
        check_step(trainer, changed, task)
