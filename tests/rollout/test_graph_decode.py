"""The graph decoder (static cache, captured step) computes what `generate` computes.

On CPU the step runs uncaptured; the CUDA-graph capture itself is exercised on the GPU by bench/rollout.py.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from fathom.models import smollm2_dir, tiny_model_dir
from fathom.rollout import ChatFormat, HFBackend, Sampling

QUESTIONS = ["What is 2+2?", "Name a color.", "Write a python loop over a list.", "Capital of France?"]


def _compare(path, new_tokens: int) -> None:
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    chat = ChatFormat(tok)
    prompts = [chat.prompt_ids("You are helpful.", q) for q in QUESTIONS]  # different lengths: left padding
    sampling = Sampling(max_new_tokens=new_tokens, temperature=0, logprobs=True)
    plain = HFBackend(model, tok, mode="plain").generate(prompts, sampling)
    graph_backend = HFBackend(model, tok, mode="graph", max_cache_len=256, graph_max_new=32)
    graph = graph_backend.generate(prompts, sampling)
    assert [g.ids for g in graph] == [p.ids for p in plain]
    assert [g.finished for g in graph] == [p.finished for p in plain]
    for g, p in zip(graph, plain, strict=True):
        assert g.logprobs == pytest.approx(p.logprobs, abs=1e-3)
    # a second call with a shorter budget reuses the same decoder (no new capture / shapes)
    again = graph_backend.generate(prompts[:3], Sampling(max_new_tokens=5, temperature=0))
    assert [a.ids for a in again] == [p.ids[:5] for p in plain[:3]]
    assert len(graph_backend._decoder.slots) == 1


def test_graph_decoder_matches_generate_on_the_tiny_model():
    _compare(tiny_model_dir("tiny-qwen"), 12)


@pytest.mark.slow
def test_graph_decoder_matches_generate_on_smollm2():
    _compare(smollm2_dir(), 20)


def test_graph_mode_refuses_truncated_sampling():
    path = tiny_model_dir("tiny-smol")
    tok = AutoTokenizer.from_pretrained(path)
    backend = HFBackend(AutoModelForCausalLM.from_pretrained(path), tok, mode="graph", max_cache_len=128)
    with pytest.raises(ValueError, match="top_p"):
        backend.generate([[1, 2, 3]], Sampling(max_new_tokens=4, top_p=0.9))
    with pytest.raises(ValueError, match="graph_max_new"):
        backend.generate([[1, 2, 3]], Sampling(max_new_tokens=4096))
