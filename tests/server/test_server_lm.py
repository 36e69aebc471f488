"""Sub-LM services that answer llm(): the in-process HF model and an OpenAI-compatible endpoint.

The endpoint is `fathom serve-lm` (a real uvicorn server on loopback) queried through the real `openai`
client by `OpenAISubLM`, inside real environment episodes.
"""

from __future__ import annotations

import asyncio

import pytest
from server_support import running_server
from transformers import AutoModelForCausalLM, AutoTokenizer

from fathom.env import EnvConfig, HFSubLM, OpenAISubLM, RLMAction, RLMEnvironment, SubLMRequest
from fathom.models import tiny_model_dir
from fathom.server.lm_server import create_lm_app
from fathom.tasks import generate_task

CALL = "```repl\nr = llm('Summarise this.', ctx[:300])\nprint(type(r).__name__, len(r) > 0)\n```"


@pytest.fixture(scope="module")
def tiny():
    path = tiny_model_dir("tiny-smol")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


async def _episodes(sub_lm, n: int) -> list[str]:
    tasks = [generate_task("niah", s, 8192) for s in range(n)]
    envs = [RLMEnvironment(EnvConfig(), sub_lm=sub_lm) for _ in tasks]
    try:
        await asyncio.gather(*(e.reset_async(task=t) for e, t in zip(envs, tasks, strict=True)))
        observations = await asyncio.gather(*(e.step_async(RLMAction(text=CALL)) for e in envs))
        assert all(e.state.llm_calls == 1 for e in envs)
        return [o.cells[0].stdout.strip() for o in observations]
    finally:
        await asyncio.gather(*(e.aclose() for e in envs))


def test_hf_sub_lm_batches_requests_from_many_episodes(tiny):
    model, tok = tiny
    sub = HFSubLM(model, tok, max_new_tokens=6)
    outputs = asyncio.run(_episodes(sub, 4))
    assert outputs == ["str True"] * 4
    assert 1 <= sub.batches_run < 4  # four episodes' calls shared generate calls


def test_hf_sub_lm_cuts_the_chunk_to_its_window(tiny):
    model, tok = tiny
    sub = HFSubLM(model, tok, max_new_tokens=2, max_input_tokens=128)
    encoded = sub._encode(SubLMRequest("Find the key.", "word " * 5000))
    assert len(encoded) <= 128


def test_openai_sub_lm_against_a_real_local_endpoint(tiny):
    model, tok = tiny
    app = create_lm_app(model, tok, "tiny")
    with running_server(app) as url:
        sub = OpenAISubLM(base_url=f"{url}/v1", model="tiny", max_tokens=6)
        outputs = asyncio.run(_episodes(sub, 3))
        assert outputs == ["str True"] * 3
        assert app.state.batcher.batches_run >= 1
        wrong = OpenAISubLM(base_url=f"{url}/v1", model="not-this-one", max_tokens=4)
        env = RLMEnvironment(EnvConfig(), sub_lm=wrong)
        try:
            env.reset(task=generate_task("niah", 0, 8192))
            obs = env.step(RLMAction(text=CALL))
            assert "NotFoundError" in obs.text and "404" in obs.text  # an error for the model, not a crash
        finally:
            env.close()
