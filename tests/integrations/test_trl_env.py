"""`fathom.integrations.trl.FathomEnv` driven the way TRL's tool loop drives it (reset with a dataset row,
tool calls, get_reward), in-process and against a real `fathom serve` app on loopback."""

from __future__ import annotations

import inspect
import json

import pytest
from server_support import running_server
from transformers.utils import get_json_schema

from fathom.env import EnvConfig, ScriptedSubLM, TaskNotFound
from fathom.integrations.trl import (
    STOPPED,
    FathomEnv,
    in_process_factory,
    outcome_of,
    remote_factory,
    tool_system_prompt,
    trl_dataset,
)
from fathom.reward.compose import compose
from fathom.server import ServerConfig, ServerError, create_app

TOKEN = "s3cret-token"


def row_of(task) -> dict:
    return {"prompt": [{"role": "user", "content": ""}], "task": json.dumps(task.to_dict())}


@pytest.fixture()
def make_env(niah_tasks):
    made = []

    def make(**kwargs) -> FathomEnv:
        env = in_process_factory(tasks=niah_tasks, **kwargs)()
        made.append(env)
        return env

    yield make
    for env in made:
        env.__exit__()


def test_trl_sees_exactly_one_tool_with_a_schema(make_env):
    env = make_env()
    # What GRPOTrainer does: public functions of the class, minus reset and get_reward, are the tools.
    public = {
        name for name, _ in inspect.getmembers(type(env), inspect.isfunction) if not name.startswith("_")
    }
    assert public == {"reset", "get_reward", "python"}
    schema = get_json_schema(env.python)["function"]
    assert schema["name"] == "python"
    assert schema["parameters"]["required"] == ["code"]
    assert schema["parameters"]["properties"]["code"]["type"] == "string"


def test_cell_output_then_final_gold_earns_correctness(make_env, niah_tasks):
    task = niah_tasks[0]
    env = make_env()
    first = env.reset(**row_of(task))
    assert task.question in first and f"{task.length_chars:,}" in first
    assert str(task.answer) not in first
    out = env.python("print(len(ctx))")
    assert out.startswith(f"[output]\n{task.length_chars}\n") and "[turn 1/12; 11 left]" in out
    out = env.python(f"FINAL({str(task.answer)!r})")
    assert "[the episode is over: answered]" in out and env.end_reason == "answered"
    reward = env.get_reward()
    breakdown = env.reward_breakdown
    assert breakdown["correct"] is True and breakdown["score"] == 1.0
    assert breakdown["components"]["correctness"] == pytest.approx(0.7)
    assert reward == pytest.approx(breakdown["total"]) and reward >= 0.8
    assert env.python("print(1)") == "The episode is over (answered); nothing ran."
    assert [o.iteration for o in env.observations] == [0, 1, 2]  # the late call ran nothing


def test_wrong_answer_is_capped_below_a_right_one(make_env, niah_tasks):
    env = make_env()
    env.reset(**row_of(niah_tasks[0]))
    env.python("FINAL('0000000')")
    assert env.reward_breakdown["correct"] is False
    assert 0.0 < env.get_reward() <= 0.25  # format pays, scaled by the wrong-answer cap


def test_episode_left_open_is_graded_as_it_stands(make_env, niah_tasks):
    task = niah_tasks[1]
    env = make_env()
    env.reset(task_id=task.id, prompt=[{"role": "user", "content": ""}])
    env.python("draft = ctx[:10]\nprint(draft)")
    assert env.reward_breakdown is None
    inner = env._episodes.env  # the RLMEnvironment: its own outcome is the reference
    assert outcome_of(env.state) == inner.outcome()
    assert env.get_reward() == 0.0
    assert env.end_reason == STOPPED
    assert env.reward_breakdown == compose(task, inner.outcome(), EnvConfig().reward).to_dict()


def test_turn_cap_ends_the_episode(make_env, niah_tasks):
    env = make_env(config=EnvConfig(max_iterations=2))
    env.reset(task_id=niah_tasks[0].id)
    assert "[turn 1/2; 1 left]" in env.python("x = 1")
    out = env.python("print(x + 1)")
    assert out.startswith("[output]\n2\n") and out.endswith("[the episode is over: max_iterations]")
    assert env.get_reward() == 0.0 and env.reward_breakdown["correct"] is False


def test_llm_subcall_is_answered_by_the_given_sub_lm(make_env, niah_tasks):
    env = make_env(sub_lm=ScriptedSubLM(lambda prompt, chunk: f"read {len(chunk)} chars for {prompt}"))
    env.reset(task_id=niah_tasks[0].id)
    out = env.python("print(llm('the number?', ctx[:500]))")
    assert "read 500 chars for the number?" in out
    assert env.state.llm_calls == 1 and env.observations[-1].subcalls[0].chunk_chars == 500


def test_model_mistakes_are_observations_not_errors(make_env, niah_tasks):
    env = make_env()
    env.reset(task_id=niah_tasks[0].id)
    assert "ZeroDivisionError" in env.python("1/0")
    assert env.python("   ") == "The code was empty; nothing ran."
    assert "nothing ran" in env.python("print(1)\n```\nprint(2)")
    assert env.state.iteration == 1  # only the cell that ran took a turn


def test_bad_rows_fail_loudly(make_env, niah_tasks):
    env = make_env()
    with pytest.raises(ValueError, match="exactly one of 'task' and 'task_id'"):
        env.reset(prompt=[])
    with pytest.raises(ValueError, match="exactly one"):
        env.reset(task=row_of(niah_tasks[0])["task"], task_id=niah_tasks[0].id)
    with pytest.raises(TaskNotFound):
        env.reset(task_id="no-such-task")
    with pytest.raises(ValueError, match="missing key"):
        env.reset(task={"id": "x"})
    with pytest.raises(RuntimeError, match="before reset"):
        make_env().python("print(1)")


def test_dataset_rows_reset_the_environment(task_file, niah_tasks, make_env):
    by_id, inline = trl_dataset(task_file), trl_dataset(task_file, inline=True)
    assert by_id.column_names == ["prompt", "task_id"] and len(by_id) == len(niah_tasks)
    assert by_id[0]["prompt"][0] == {"role": "system", "content": tool_system_prompt()}
    assert "`python` tool" in tool_system_prompt()
    record = json.loads(inline[1]["task"])
    assert record["document"] == niah_tasks[1].document and "document_path" not in record
    env = make_env()
    for dataset in (by_id, inline):
        assert niah_tasks[1].question in env.reset(**dataset[1])
        env.python(f"FINAL({str(niah_tasks[1].answer)!r})")
        assert env.reward_breakdown["correct"] is True


@pytest.fixture(scope="module")
def server_url(niah_tasks):
    app = create_app(ServerConfig(token=TOKEN, idle_timeout_s=None), tasks=niah_tasks)
    with running_server(app) as url:
        yield url


def test_remote_episode_matches_in_process(server_url, niah_tasks, task_file, make_env):
    task = niah_tasks[0]
    remote = remote_factory(server_url, token=TOKEN, tasks=task_file)()
    local = make_env()
    try:
        texts = []
        for env in (remote, local):
            texts.append([env.reset(task_id=task.id), env.python("print(ctx.count('magic'))")])
            texts[-1].append(env.python(f"FINAL({str(task.answer)!r})"))
        assert texts[0] == texts[1]
        assert remote.get_reward() == pytest.approx(local.get_reward())
        assert remote.reward_breakdown == local.reward_breakdown and remote.reward_breakdown["correct"]
        # An inline row needs no local task file; an open episode is graded here from the server's state.
        inline_only = remote_factory(server_url, token=TOKEN)()
        inline_only.reset(**row_of(niah_tasks[1]))
        inline_only.python("print(1)")
        assert inline_only.get_reward() == 0.0 and inline_only.end_reason == STOPPED
        assert inline_only.state.iteration == 1
        with pytest.raises(KeyError, match="needs the server's task file"):
            inline_only.reset(task_id=task.id)
        inline_only.__exit__()
    finally:
        remote.__exit__()


def test_remote_needs_the_token(server_url, niah_tasks):
    env = remote_factory(server_url, token="wrong")()
    with pytest.raises(ServerError) as raised:
        env.reset(**row_of(niah_tasks[0]))
    assert raised.value.status == 401
    env.__exit__()


def test_a_remote_episode_outliving_its_server_closes_with_a_warning(niah_tasks, caplog):
    """TRL leaves environments to the garbage collector, which may run after the server is gone: the
    close says so in the log and raises nothing (an exception in a finalizer only prints a traceback)."""
    app = create_app(ServerConfig(token=TOKEN, idle_timeout_s=None), tasks=niah_tasks)
    with running_server(app) as url:
        env = remote_factory(url, token=TOKEN)()
        env.reset(**row_of(niah_tasks[0]))
        assert "6" in env.python("print(2 * 3)")
    with caplog.at_level("WARNING", logger="fathom.integrations.trl"):
        env.__exit__()
    [record] = caplog.records
    assert record.getMessage().startswith(f"could not end the session on {url}: ConnectError")
