"""The RLM environment end to end: real sandbox workers, real tasks, the real reward."""

from __future__ import annotations

import asyncio
import os

import pytest
from pydantic import ValidationError

from fathom.env import EnvConfig, RLMAction, RLMEnvironment, ScriptedSubLM, TaskNotFound
from fathom.env.prompts import NO_CODE_MESSAGE
from fathom.sandbox.proctree import pid_alive, process_tree
from fathom.tasks import generate_task


def repl(code: str) -> RLMAction:
    return RLMAction(text=f"Let me look.\n```repl\n{code}\n```")


@pytest.fixture()
def task():
    return generate_task("niah", 11, 8192)


@pytest.fixture()
def env():
    environment = RLMEnvironment(
        EnvConfig(max_iterations=4), sub_lm=ScriptedSubLM(lambda p, c: f"{p}|{len(c)}")
    )
    yield environment
    environment.close()


def test_reset_shows_question_and_size_never_the_document(env, task):
    obs = env.reset(task=task)
    assert obs.question == task.question and task.question in obs.text
    assert obs.doc_chars == task.length_chars == len(task.document)
    assert f"{task.length_chars:,}" in obs.text
    assert "ctx" in obs.system_prompt and "FINAL" in obs.system_prompt
    assert str(task.answer) not in obs.text + obs.system_prompt  # the needle's value is not shown
    assert task.document[1000:1100] not in obs.text
    assert not obs.done and obs.reward is None
    assert {"rlimits", "seccomp"} <= set(env.state.isolation)


def test_variables_persist_and_blocks_run_in_order(env, task):
    env.reset(task=task)
    obs = env.step(RLMAction(text="```repl\nx = len(ctx)\n```\nthen\n```repl\nprint(x * 2)\n```"))
    assert [c.code for c in obs.cells] == ["x = len(ctx)", "print(x * 2)"]
    assert obs.cells[1].stdout.strip() == str(2 * len(task.document))
    obs = env.step(repl("print(x)"))
    assert obs.cells[0].stdout.strip() == str(len(task.document))
    assert obs.iteration == 2 and env.state.iteration == 2 and not obs.done


def test_turn_without_code_is_told_so_and_counts(env, task):
    env.reset(task=task)
    obs = env.step(RLMAction(text="I think the answer is 42. FINAL(42)"))
    assert NO_CODE_MESSAGE in obs.text and obs.cells == []
    assert obs.iteration == 1 and not obs.answer_ready  # FINAL in prose is not an answer


def test_errors_are_shown_and_the_episode_goes_on(env, task):
    env.reset(task=task)
    obs = env.step(repl("1/0"))
    assert "ZeroDivisionError" in obs.text and not obs.done
    obs = env.step(repl("print('still here', len(ctx))"))
    assert "still here" in obs.text


def test_correct_answer_ends_with_reward_breakdown(env, task):
    env.reset(task=task)
    obs = env.step(repl(f"FINAL({task.answer!r})"))
    assert obs.done and obs.end_reason == "answered" and obs.answer == task.answer
    assert obs.reward_breakdown["correct"] is True
    assert obs.reward == pytest.approx(obs.reward_breakdown["total"])
    assert obs.reward > 1.0  # correct, one short turn, no sub-calls: near the 1.10 maximum
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(repl("print(1)"))


def test_answer_dict_protocol_and_wrong_answer_is_capped(env, task):
    env.reset(task=task)
    obs = env.step(repl("answer['content'] = '0000000'\nanswer['ready'] = True"))
    assert obs.done and obs.answer == "0000000"
    assert obs.reward_breakdown["correct"] is False and obs.reward <= 0.25


def test_iteration_cap_ends_unanswered_with_zero(env, task):
    env.reset(task=task)
    for _ in range(3):
        assert not env.step(repl("print(1)")).done
    obs = env.step(repl("print(1)"))
    assert obs.done and obs.end_reason == "max_iterations" and obs.reward == 0.0


def test_token_budget_ends_the_episode(task):
    env = RLMEnvironment(EnvConfig(max_episode_tokens=100), sub_lm=None)
    try:
        env.reset(task=task)
        assert not env.step(RLMAction(text="```repl\nprint(1)\n```", num_tokens=60)).done
        obs = env.step(RLMAction(text="```repl\nprint(2)\n```", num_tokens=60))
        assert obs.done and obs.end_reason == "token_budget" and env.state.tokens == 120
    finally:
        env.close()


def test_subcalls_are_counted_logged_and_batched(env, task):
    env.reset(task=task)
    obs = env.step(repl("r = llm('q', ctx[:500]); rs = llm_batch([('a', 'xy'), ('b', 'xyz')]); print(r, rs)"))
    assert "q|500" in obs.text and "['a|2', 'b|3']" in obs.text
    assert [(s.prompt, s.chunk_chars, s.depth) for s in obs.subcalls] == [
        ("q", 500, 1),
        ("a", 2, 1),
        ("b", 3, 1),
    ]
    assert env.state.llm_calls == 3 and env.state.llm_chars == 1 + 500 + 3 + 4
    assert env.sub_lm.calls == 2  # llm_batch reaches the service as one batch


def test_no_sub_lm_means_no_llm(task):
    env = RLMEnvironment(EnvConfig(max_depth=0), sub_lm=ScriptedSubLM(lambda p, c: "x"))
    try:
        obs = env.reset(task=task)
        assert "not available" in obs.text
        obs = env.step(repl("llm('q', 'c')"))
        assert "RuntimeError" in obs.text and "not available" in obs.text
    finally:
        env.close()


def test_reset_by_family_and_seed_and_by_task_id(task):
    env = RLMEnvironment(EnvConfig(default_length_tokens=8192), tasks=[task])
    try:
        obs = env.reset(family="niah", seed=11)
        assert obs.task_id == task.id and obs.question == task.question  # same generator, same task
        assert env.reset(task_id=task.id).question == task.question
        with pytest.raises(TaskNotFound):
            env.reset(task_id="nope")
        with pytest.raises(ValueError, match="exactly one"):
            env.reset(task=task, family="niah")
    finally:
        env.close()


def test_actions_and_observations_reject_unknown_fields():
    with pytest.raises(ValidationError):
        RLMAction(text="x", cod="y")
    with pytest.raises(ValidationError):
        RLMAction(text="x", num_tokens=-1)


def test_many_episodes_share_one_loop():
    async def run():
        tasks = [generate_task("keychain", s, 8192) for s in range(12)]
        envs = [RLMEnvironment(EnvConfig()) for _ in tasks]
        await asyncio.gather(*(e.reset_async(task=t) for e, t in zip(envs, tasks, strict=True)))
        code = "import re\nprint(len(re.findall('drawer opened', ctx)))"
        obs = await asyncio.gather(*(e.step_async(repl(code)) for e in envs))
        await asyncio.gather(*(e.aclose() for e in envs))
        return [int(o.cells[0].stdout) for o in obs], tasks

    counts, tasks = asyncio.run(run())
    assert counts == [t.document.count("drawer opened") for t in tasks]
    assert all(c > 0 for c in counts)


def test_metadata_names_the_environment():
    meta = RLMEnvironment().get_metadata()
    assert meta.name == "fathom-rlm" and "ctx" in meta.description


def test_sync_api_works_inside_a_running_loop(task):
    async def inside_a_loop():  # a notebook kernel runs one
        env = RLMEnvironment(EnvConfig())
        try:
            env.reset(task=task)
            return env.step(repl("print(len(ctx))")).cells[0].stdout.strip()
        finally:
            env.close()

    assert asyncio.run(inside_a_loop()) == str(len(task.document))


def test_each_episode_gets_a_fresh_worker_and_none_outlives_aclose(task):
    """Workers are never reused across episodes, and once aclose returns no process of any episode the
    environment ran is left."""

    async def run():
        env = RLMEnvironment(EnvConfig(max_iterations=1))
        pids = []
        for _ in range(2):
            await env.reset_async(task=task)
            pids.append(set(process_tree(os.getpid())[1:]))
            obs = await env.step_async(repl("import os\nprint(os.getpid())"))
            assert obs.done and obs.end_reason == "max_iterations" and obs.cells[0].stdout.strip()
        await env.aclose()
        return pids

    first, second = asyncio.run(run())
    assert first and second - first  # the second episode runs on a worker of its own
    assert not [p for p in first | second if pid_alive(p)]


def test_reset_does_not_wait_for_the_ended_episodes_teardown(task):
    """The ended episode's worker dies beside the next episode; the next reset or aclose collects it."""

    async def run() -> None:
        env = RLMEnvironment(EnvConfig(max_iterations=1))
        await env.reset_async(task=task)
        old = env._sandbox
        assert old is not None
        old_pid, close = old.processes[-1], old.close

        async def slow_close() -> None:
            await asyncio.sleep(1.5)
            await close()

        old.close = slow_close  # type: ignore[method-assign]
        assert (await env.step_async(repl("print(1)"))).done
        started = asyncio.get_running_loop().time()
        await env.reset_async(task=task)
        assert asyncio.get_running_loop().time() - started < 1.0
        assert pid_alive(old_pid)  # still being retired beside the new episode
        await env.aclose()
        assert not pid_alive(old_pid)

    asyncio.run(run())
