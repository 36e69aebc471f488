"""The rollout engine with a real tiny model, real sandboxes and real tasks, on CPU."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fathom.env import EnvConfig, RLMEnvironment
from fathom.env.expert import EXPERTS, expert_reader
from fathom.models import tiny_model_dir
from fathom.rollout import ChatFormat, EngineSubLM, HFBackend, RolloutConfig, RolloutEngine, Sampling
from fathom.rollout.policies import ScriptedBackend, expert_backend
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


def test_tiny_model_rollouts_are_token_exact(tiny, tasks):
    model, tok = tiny
    chat = ChatFormat(tok)
    backend = HFBackend(model, tok)
    engine = RolloutEngine(
        backend,
        chat,
        lambda: RLMEnvironment(EnvConfig(max_iterations=3)),
        RolloutConfig(
            max_turns=3, max_total_tokens=2000, sampling=Sampling(max_new_tokens=24, logprobs=True)
        ),
    )
    rollouts = engine.run_sync(tasks)
    assert engine.generate_calls == 3  # one batched generate per turn for all episodes
    for r in rollouts:
        assert len(r.completion_ids) == len(r.env_mask) == len(r.logprobs)
        assert r.env_mask[-1] == 1  # every rollout ends on a model token
        runs = segments(r.env_mask)
        model_runs = [(s, e) for v, s, e in runs if v == 1]
        assert len(model_runs) == r.turns == 3 and r.end_reason == "max_iterations"
        # model runs are the sampled ids verbatim: they decode to the turn texts the environment read
        for (s, e), turn in zip(model_runs, r.trace["turns"], strict=True):
            assert tok.decode(r.completion_ids[s:e], skip_special_tokens=True) == turn["text"]
        assert all(lp <= 0.0 for lp, m in zip(r.logprobs, r.env_mask, strict=True) if m)
        assert all(lp == 0.0 for lp, m in zip(r.logprobs, r.env_mask, strict=True) if not m)
        # the whole sequence is exactly the conversation the model saw, as the chat template renders it
        messages = [
            {"role": "system", "content": r.trace["system"]},
            {"role": "user", "content": r.trace["first"]},
        ]
        for i, turn in enumerate(r.trace["turns"]):
            messages.append({"role": "assistant", "content": turn["text"]})
            if i < len(r.trace["turns"]) - 1:
                messages.append(
                    {
                        "role": "user",
                        "content": turn["text_obs"] if "text_obs" in turn else turn["observation"],
                    }
                )
        rendered = tok.apply_chat_template(messages, tokenize=False)
        decoded = tok.decode(r.prompt_ids + r.completion_ids)
        # ...up to the closing of the last turn, which a rollout never appends (it ends on a model token)
        assert rendered.startswith(decoded) and rendered[len(decoded) :] in ("\n", "<|im_end|>\n")


def test_budget_stops_episode_and_expert_runs_through_the_engine(tiny):
    _, tok = tiny
    chat = ChatFormat(tok)
    tasks = [generate_task(f, 3, 8192) for f in sorted(EXPERTS)]  # the families it has a program for
    reader = expert_reader()
    engine = RolloutEngine(
        expert_backend(chat, tasks), chat, lambda: RLMEnvironment(EnvConfig(), sub_lm=reader)
    )
    rollouts = engine.run_sync(tasks)
    assert [r.breakdown["correct"] for r in rollouts] == [True] * len(tasks)
    assert all(r.end_reason == "answered" and r.env_mask[-1] == 1 for r in rollouts)

    tight = RolloutEngine(
        expert_backend(chat, tasks),
        chat,
        lambda: RLMEnvironment(EnvConfig(), sub_lm=reader),
        RolloutConfig(max_total_tokens=150),
    )
    short = tight.run_sync(tasks[:2])
    assert all(r.end_reason == "token_budget" and r.reward == 0.0 for r in short)
    assert all(0 < len(r.completion_ids) <= 150 for r in short)


def test_subcalls_of_all_episodes_share_one_backend_call(tiny, tasks):
    _, tok = tiny
    chat = ChatFormat(tok)
    code = "```repl\nprint(llm('say ok', ctx[:200]))\nFINAL('0')\n```"
    policy = ScriptedBackend(chat, lambda conversation: code)
    sub_backend = ScriptedBackend(chat, lambda conversation: "ok")
    sub = EngineSubLM(sub_backend, chat, Sampling(max_new_tokens=8), 512)
    engine = RolloutEngine(policy, chat, lambda: RLMEnvironment(EnvConfig(), sub_lm=sub), sub_lm=sub)
    rollouts = engine.run_sync(tasks)
    assert sub_backend.calls == 1 and sub.batches_run == 1  # three episodes' llm() calls, one batch
    assert all("ok" in r.trace["turns"][0]["observation"] for r in rollouts)


def test_crash_and_timeout_end_only_their_episode(tiny, tasks):
    _, tok = tiny
    chat = ChatFormat(tok)
    scripts = {
        tasks[0].question: "```repl\nimport os\nos._exit(3)\n```",
        tasks[1].question: "```repl\nwhile True:\n    pass\n```",
        tasks[2].question: f"```repl\nFINAL({tasks[2].answer!r})\n```",
    }
    policy = ScriptedBackend(chat, lambda conv: next(s for q, s in scripts.items() if q in conv))
    config = EnvConfig(max_iterations=1, sandbox=SandboxConfig(soft_timeout_s=0.5, hard_timeout_s=1.5))
    rollouts = RolloutEngine(policy, chat, lambda: RLMEnvironment(config)).run_sync(tasks)
    crashed, hung, fine = rollouts
    assert "restarted" in crashed.trace["turns"][0]["observation"]
    assert "TimeoutError" in hung.trace["turns"][0]["observation"]
    assert crashed.reward == hung.reward == 0.0 and crashed.end_reason == hung.end_reason == "max_iterations"
    assert fine.breakdown["correct"] and fine.end_reason == "answered"


def test_sub_calls_can_bypass_the_adapter():
    import asyncio

    from fathom.env import SubLMRequest
    from fathom.models import LoraSpec, ModelSpec, load_model

    torch.manual_seed(0)
    model, tok = load_model(ModelSpec(name="tiny-smol", lora=LoraSpec(r=4, alpha=64)))
    with torch.no_grad():  # LoRA starts as a no-op (B = 0): make the adapter change the model
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    chat = ChatFormat(tok)
    backend = HFBackend(model, tok)
    greedy = Sampling(max_new_tokens=6, temperature=0)
    request = [SubLMRequest("Say something.", "text " * 20)]
    with_adapter = asyncio.run(EngineSubLM(backend, chat, greedy, 256).complete(request))
    without = asyncio.run(EngineSubLM(backend, chat, greedy, 256, use_adapters=False).complete(request))
    with model.disable_adapter():
        base = asyncio.run(EngineSubLM(backend, chat, greedy, 256).complete(request))
    assert without[0].text == base[0].text
    assert with_adapter[0].text != base[0].text


def test_expert_backend_reads_its_turn_from_the_environment_footer(tiny):
    """Not from chat-template markers (their decoding differs across transformers releases: on 5.17 a
    marker count skipped the oolong expert's second turn); a footer-like line inside a document is
    overridden by the real footer that ends the last observation."""
    from fathom.env.expert import expert_turn

    _, tok = tiny
    chat = ChatFormat(tok)
    task = generate_task("oolong", 3, 8192)
    reply = expert_backend(chat, [task]).fn
    fresh = f"Question: {task.question}"
    assert reply(fresh) == expert_turn(task, 0)
    after_one = fresh + "\n[output]\nquoted: [turn 7/12; 5 left]\n\n[turn 1/12; 11 left]"
    assert reply(after_one) == expert_turn(task, 1) != expert_turn(task, 0)
    assert reply(after_one + "\n[output]\n3\n\n[turn 2/12; 10 left]") == expert_turn(task, 2)
