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


def _lora_tiny():
    """tiny-smol with a LoRA adapter that changes its outputs (PEFT starts B at zero: a no-op)."""
    from fathom.models import LoraSpec, ModelSpec, load_model

    torch.manual_seed(0)
    model, tok = load_model(
        ModelSpec(name="tiny-smol", lora=LoraSpec(r=4, alpha=64, dropout=0.0), device="cpu")
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model, tok


def test_adapters_enabled_follows_peft():
    from fathom.rollout.graph_decode import adapters_enabled

    model, _ = _lora_tiny()
    assert adapters_enabled(model)
    with model.disable_adapter():
        assert not adapters_enabled(model)
    assert adapters_enabled(model)
    # a model without adapters (transformers' own `disable_adapters()` method must not be mistaken for PEFT's)
    assert adapters_enabled(AutoModelForCausalLM.from_pretrained(tiny_model_dir("tiny-smol")))


def test_graph_mode_keeps_a_slot_per_adapter_state():
    """A captured graph freezes the branch PEFT took, so sub-calls under `disable_adapter()` (EngineSubLM with
    use_adapters=False) must not share the policy's slot. On a CPU nothing is captured: the outputs show the
    semantics the slots must keep; the slot keys show that each state got its own graph."""
    model, tok = _lora_tiny()
    chat = ChatFormat(tok)
    prompts = [chat.prompt_ids("You are helpful.", q) for q in QUESTIONS]
    sampling = Sampling(max_new_tokens=8, temperature=0)
    plain = HFBackend(model, tok, mode="plain")
    graph = HFBackend(model, tok, mode="graph", max_cache_len=256, graph_max_new=8)
    with_adapter = graph.generate(prompts, sampling)
    with model.disable_adapter():
        without = graph.generate(prompts, sampling)
        base = plain.generate(prompts, sampling)
    again = graph.generate(prompts, sampling)
    assert (
        [g.ids for g in with_adapter]
        == [g.ids for g in again]
        == [p.ids for p in plain.generate(prompts, sampling)]
    )
    assert [g.ids for g in without] == [b.ids for b in base]
    assert [g.ids for g in without] != [g.ids for g in with_adapter]
    assert sorted(graph._decoder.slots) == [(4, 256, False), (4, 256, True)]
