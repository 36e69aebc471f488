"""The rollout engine with a real tiny model, real sandboxes and real tasks, on CPU."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fathom.env import EnvConfig, RLMEnvironment, SubLMRequest
from fathom.models import tiny_model_dir
from fathom.policies.expert import EXPERTS
from fathom.policies.readers import expert_reader
from fathom.policies.scripted import ScriptedBackend, expert_backend
from fathom.rollout import ChatFormat, HFBackend, RolloutConfig, Sampling
from fathom.rollout.episode import Episode
from fathom.rollout.wiring import build_engine, hf_policy_service, hf_service
from fathom.sandbox import SandboxConfig
from fathom.tasks import generate_task


@pytest.fixture(scope="module")
def tiny():
    path = tiny_model_dir("tiny-smol")
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def tasks():
    return [generate_task("niah", s, 8192) for s in range(3)]


def segments(mask: list[int]) -> list[tuple[int, int, int]]:
    """(value, start, end) runs of the mask."""
    runs, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            runs.append((mask[start], start, i))
            start = i
    return runs


def scripted(chat: ChatFormat, scripts: dict[str, str]) -> ScriptedBackend:
    """A policy that answers each task (found by its question in the conversation) with a fixed turn."""
    return ScriptedBackend(chat, lambda conv: next(s for q, s in scripts.items() if q in conv))


def test_tiny_model_episodes_are_token_exact(tiny, tasks):
    model, tok = tiny
    chat = ChatFormat(tok)
    config = RolloutConfig(
        max_turns=3, max_total_tokens=2000, sampling=Sampling(max_new_tokens=24, logprobs=True)
    )
    engine = build_engine(hf_policy_service(model, tok), chat, config, reader=None)
    episodes = engine.run_sync(tasks)
    for e in episodes:
        assert len(e.completion_ids) == len(e.env_mask) == len(e.logprobs)
        assert e.env_mask[-1] == 1  # every episode ends on a model token
        model_runs = [(s, t) for v, s, t in segments(e.env_mask) if v == 1]
        assert len(model_runs) == len(e.turns) == 3 and e.end_reason == "max_iterations"
        # model runs are the sampled ids verbatim: they decode to the turn texts the environment read
        for (s, t), turn in zip(model_runs, e.turns, strict=True):
            assert e.completion_ids[s:t] == turn.ids
            assert tok.decode(turn.ids, skip_special_tokens=True) == turn.text
        assert all(lp <= 0.0 for lp, m in zip(e.logprobs, e.env_mask, strict=True) if m)
        assert all(lp == 0.0 for lp, m in zip(e.logprobs, e.env_mask, strict=True) if not m)
        # the whole sequence is exactly the conversation the model saw, as the chat template renders it
        messages = [{"role": "system", "content": e.system}, {"role": "user", "content": e.first}]
        for i, turn in enumerate(e.turns):
            messages.append({"role": "assistant", "content": turn.text})
            if i < len(e.turns) - 1:
                messages.append({"role": "user", "content": turn.observation})
        rendered = tok.apply_chat_template(messages, tokenize=False)
        decoded = tok.decode(e.prompt_ids + e.completion_ids)
        # ...up to the closing of the last turn, which an episode never appends (it ends on a model token)
        assert rendered.startswith(decoded) and rendered[len(decoded) :] in ("\n", "<|im_end|>\n")
        assert e.reward is not None and e.reward.total == 0.0


def test_expert_solves_every_family_and_a_budget_stops_it(tiny):
    _, tok = tiny
    chat = ChatFormat(tok)
    tasks = [generate_task(f, 3, 8192) for f in sorted(EXPERTS)]
    config = RolloutConfig(max_turns=12, max_total_tokens=1 << 20)
    episodes = build_engine(hf_service(expert_backend(chat, tasks)), chat, config, expert_reader()).run_sync(
        tasks
    )
    assert [e.correct for e in episodes] == [True] * len(tasks)
    assert all(e.end_reason == "answered" and e.env_mask[-1] == 1 for e in episodes)
    assert all(e.answer is not None and e.reward.to_dict()["correct"] for e in episodes)

    tight = build_engine(
        hf_service(expert_backend(chat, tasks)), chat, RolloutConfig(max_total_tokens=150), expert_reader()
    )
    short = tight.run_sync(tasks[:2])
    assert all(e.end_reason == "token_budget" and e.total_reward == 0.0 for e in short)
    assert all(0 < len(e.completion_ids) <= 150 for e in short)


def test_policy_subcalls_are_recorded_with_their_token_ids(tiny, tasks):
    _, tok = tiny
    chat = ChatFormat(tok)
    code = "```repl\nprint(llm('say ok', ctx[:200]))\nFINAL('0')\n```"

    def reply(conversation: str) -> str:  # the same backend plays the policy and reads the sub-call
        return "ok" if "Answer briefly and exactly." in conversation else code

    service = hf_service(ScriptedBackend(chat, reply))
    config = RolloutConfig(max_turns=2, sub_sampling=Sampling(max_new_tokens=8, temperature=0.0))
    engine = build_engine(service, chat, config, reader="policy")
    episodes = engine.run_sync(tasks)
    for task, e in zip(tasks, episodes, strict=True):
        (call,) = e.subcalls
        assert call.reply == "ok" and call.depth == 1 and call.adapter
        # exactly the prompt the sub-LM saw: what reader-role SFT data must reproduce
        assert call.prompt_ids == engine.sub_prompt_ids(SubLMRequest("say ok", task.document[:200]))
        assert tok.decode(call.ids, skip_special_tokens=True) == "ok"
        assert "ok" in e.turns[0].observation and e.turns[0].subcalls[0].reply == "ok"
    assert service.stats.requests == 6  # three turns and three sub-calls, all through the one service


def test_requests_ready_together_share_one_batch(tiny):
    """BatchingService: what is pending when the backend is free goes out as one batch, each row cut to
    its own budget; adapter states and sampling setups never share a batch."""
    _, tok = tiny
    chat = ChatFormat(tok)
    backend = ScriptedBackend(chat, lambda conversation: "word " * 100)
    service = hf_service(backend)

    async def go():
        budgets = [4, 16, 64]
        gens = await asyncio.gather(
            *(service.generate([1, 2, 3], Sampling(max_new_tokens=n)) for n in budgets),
            service.generate([1, 2, 3], Sampling(max_new_tokens=8, temperature=0.0)),
        )
        return budgets, gens

    budgets, gens = asyncio.run(go())
    assert backend.calls == 2 and service.stats.peak_batch == 3  # the greedy request went on its own
    assert [len(g.ids) for g in gens[:3]] == budgets and not gens[0].finished
    assert len(gens[3].ids) == 8


def test_depth_two_runs_a_child_episode_in_the_engine(tiny, tasks):
    _, tok = tiny
    chat = ChatFormat(tok)
    parent = "```repl\nprint(llm('how long?', ctx[:1234]))\n```"
    child = "```repl\nFINAL(str(len(ctx)) + ' chars')\n```"
    seen = []

    def reply(conversation: str) -> str:
        seen.append(conversation)
        return child if "how long?" in conversation else parent

    config = RolloutConfig(max_turns=1, max_depth=2)
    (episode,) = build_engine(hf_service(ScriptedBackend(chat, reply)), chat, config, "policy").run_sync(
        tasks[:1]
    )
    assert "1234 chars" in episode.turns[0].observation
    assert episode.turns[0].subcalls[0].depth == 1
    assert any("1,234 characters" in c for c in seen)  # the child episode saw the chunk's size, as a task


def test_a_second_model_reads_the_llm_calls(tiny, tasks):
    """`reader` "base" over a `RoutedService` whose second service is another model (base_adapter: asked
    for its own weights): each llm() call goes to that model, never to the policy's."""
    from fathom.rollout.service import RoutedService

    _, tok = tiny
    chat = ChatFormat(tok)
    policy_seen, reader_seen = [], []

    def policy(conversation: str) -> str:
        policy_seen.append(conversation)
        return "```repl\nprint('reader:', llm('who wrote it?', ctx[:400]))\n```"

    def reader(conversation: str) -> str:
        reader_seen.append(conversation)
        return "the second model read it"

    config = RolloutConfig(max_turns=1)
    routed = RoutedService(
        hf_service(ScriptedBackend(chat, policy)),
        hf_service(ScriptedBackend(chat, reader)),
        base_adapter=True,
    )
    (episode,) = build_engine(routed, chat, config, "base").run_sync(tasks[:1])
    assert "reader: the second model read it" in episode.turns[0].observation
    assert len(reader_seen) == 1 and "who wrote it?" in reader_seen[0]
    assert len(policy_seen) == 1  # its one turn; the llm() call was not its to answer
    assert routed.main.stats.requests == 1 and routed.base.stats.requests == 1
    # without base_adapter the second service is asked to switch off an adapter it does not have
    unrouted = RoutedService(routed.main, routed.base)
    with pytest.raises(ValueError, match="no adapter to switch off"):
        asyncio.run(unrouted.generate([1, 2], Sampling(max_new_tokens=2), adapter=False))


def test_no_episode_waits_for_another_unless_turns_are_synchronous(tiny, tasks):
    """One episode's first cell sleeps; the others' next turns do not wait for it (continuous), unless
    ``sync_turns`` (every live episode's turn generated together)."""
    _, tok = tiny
    chat = ChatFormat(tok)
    order: list[str] = []

    def runner(sync: bool) -> list[str]:
        order.clear()

        def reply(conversation: str) -> str:
            task = next(t for t in tasks if t.question in conversation)
            turn = conversation.count("[turn ")
            order.append(f"{task.id}:{turn}")
            if task is tasks[0] and turn == 0:
                return "```repl\nimport time\ntime.sleep(1.5)\nprint('slow')\n```"
            return "```repl\nprint('quick')\n```"

        config = RolloutConfig(max_turns=3, sync_turns=sync)
        build_engine(hf_service(ScriptedBackend(chat, reply)), chat, config, None).run_sync(tasks)
        return list(order)

    continuous = runner(False)
    slow_second = continuous.index(f"{tasks[0].id}:1")
    assert {f"{tasks[1].id}:2", f"{tasks[2].id}:2"} <= set(continuous[:slow_second])  # finished first
    synced = runner(True)
    slow_second = synced.index(f"{tasks[0].id}:1")
    assert not {f"{tasks[1].id}:2", f"{tasks[2].id}:2"} & set(synced[:slow_second])  # they waited


def test_crash_and_timeout_end_only_their_episode(tiny, tasks):
    _, tok = tiny
    chat = ChatFormat(tok)
    policy = scripted(
        chat,
        {
            tasks[0].question: "```repl\nimport os\nos._exit(3)\n```",
            tasks[1].question: "```repl\nwhile True:\n    pass\n```",
            tasks[2].question: f"```repl\nFINAL({tasks[2].answer!r})\n```",
        },
    )
    sandbox = SandboxConfig(soft_timeout_s=0.5, hard_timeout_s=1.5)
    engine = build_engine(hf_service(policy), chat, RolloutConfig(max_turns=1), None, sandbox=sandbox)
    crashed, hung, fine = engine.run_sync(tasks)
    assert "restarted" in crashed.turns[0].observation
    assert "TimeoutError" in hung.turns[0].observation
    assert crashed.total_reward == hung.total_reward == 0.0
    assert crashed.end_reason == hung.end_reason == "max_iterations"
    assert fine.correct and fine.end_reason == "answered"


def test_our_own_errors_fail_the_run_loudly(tiny, tasks):
    """An exception in the environment or the service is not a dropped row: the run raises it."""
    _, tok = tiny
    chat = ChatFormat(tok)

    class Broken:
        def generate(self, prompts, sampling):
            raise RuntimeError("backend exploded")

    with pytest.raises(RuntimeError, match="backend exploded"):
        build_engine(hf_service(Broken()), chat, RolloutConfig(max_turns=2), None).run_sync(tasks)

    def bad_env(config, reader):
        raise OSError("no sandbox today")

    policy = scripted(chat, {t.question: "```repl\nprint(1)\n```" for t in tasks})
    engine = build_engine(hf_service(policy), chat, RolloutConfig(), None, make_env=bad_env)
    with pytest.raises(OSError, match="no sandbox today"):
        engine.run_sync(tasks)


def test_sub_calls_can_bypass_the_adapter(tasks):
    from fathom.models import LoraSpec, ModelSpec, load_model

    torch.manual_seed(0)
    model, tok = load_model(ModelSpec(name="tiny-smol", lora=LoraSpec(r=4, alpha=64)))
    with torch.no_grad():  # LoRA starts as a no-op (B = 0): make the adapter change the model
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    chat = ChatFormat(tok)
    service = hf_policy_service(model, tok)
    greedy = Sampling(max_new_tokens=6, temperature=0)
    prompt = chat.prompt_ids("Answer briefly and exactly.", "Say something.\n\n<text>\nx\n</text>")

    async def both():
        return await asyncio.gather(
            service.generate(prompt, greedy, adapter=True), service.generate(prompt, greedy, adapter=False)
        )

    with_adapter, without = asyncio.run(both())
    with model.disable_adapter():
        (base,) = HFBackend(model, tok).generate([prompt], greedy)
    assert without.ids == base.ids
    assert with_adapter.ids != base.ids
    assert service.stats.calls == 2  # adapter on and off never share a batch


def test_episode_round_trips_through_its_trace_form(tiny):
    _, tok = tiny
    chat = ChatFormat(tok)
    task = generate_task("vartrack", 1, 8192)
    config = RolloutConfig(max_turns=12, max_total_tokens=1 << 20)
    (episode,) = build_engine(
        hf_service(expert_backend(chat, [task])), chat, config, expert_reader()
    ).run_sync([task])
    back = Episode.from_json(json.loads(json.dumps(episode.to_json())))
    assert back.reward == episode.reward and back.end_reason == episode.end_reason == "answered"
    assert [t.text for t in back.turns] == [t.text for t in episode.turns]
    assert back.turns[0].cells == episode.turns[0].cells and back.answer == episode.answer
    assert back.behaviour()["code_cells"] == episode.behaviour()["code_cells"] > 0


def test_expert_backend_reads_its_turn_from_the_environment_footer(tiny):
    """Not from chat-template markers (their decoding differs across transformers releases: on 5.17 a
    marker count skipped the oolong expert's second turn); a footer-like line inside a document is
    overridden by the real footer that ends the last observation."""
    from fathom.policies.expert import expert_turn

    _, tok = tiny
    chat = ChatFormat(tok)
    task = generate_task("oolong", 3, 8192)
    reply = expert_backend(chat, [task]).fn
    fresh = f"Question: {task.question}"
    assert reply(fresh) == expert_turn(task, 0)
    after_one = fresh + "\n[output]\nquoted: [turn 7/12; 5 left]\n\n[turn 1/12; 11 left]"
    assert reply(after_one) == expert_turn(task, 1) != expert_turn(task, 0)
    assert reply(after_one + "\n[output]\n3\n\n[turn 2/12; 10 left]") == expert_turn(task, 2)


def test_environment_alone_has_no_child_episode_loop():
    """Recursion lives in the engine: the environment passes every llm() call to its sub-LM."""
    assert not hasattr(RLMEnvironment(EnvConfig(max_depth=2)), "child_policy")


def test_the_models_window_ends_an_episode_like_its_token_budget(tiny, tasks):
    """A window smaller than prompt + budget: the episode stops at the window (token_budget), no request
    outgrows it, and nothing raises."""
    _, tok = tiny
    chat = ChatFormat(tok)
    policy = scripted(chat, {t.question: "```repl\nprint('x' * 400)\n```" for t in tasks[:1]})
    config = RolloutConfig(max_turns=12, max_total_tokens=1 << 20, context_tokens=900)
    (episode,) = build_engine(hf_service(policy), chat, config, None).run_sync(tasks[:1])
    assert episode.end_reason == "token_budget" and len(episode.turns) >= 2
    assert len(episode.prompt_ids) + episode.length <= 900
