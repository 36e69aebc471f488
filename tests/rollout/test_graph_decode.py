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


def test_lean_decoder_runs_in_the_weights_dtype_under_accelerates_autocast_wrapper():
    """GRPO generates from the model accelerate prepared, whose `forward` is wrapped in bf16 autocast (and
    TRL's unwrapping keeps that wrapper). The decoder calls the original forward with autocast off, so its
    static cache holds the weights' dtype and it decodes exactly what the unprepared fp32 model decodes."""
    from accelerate import Accelerator

    path = tiny_model_dir("tiny-qwen")
    tok = AutoTokenizer.from_pretrained(path)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    prepared = Accelerator(mixed_precision="bf16", cpu=True).prepare(
        AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    )
    assert "_original_forward" in prepared.__dict__  # the wrapper this test is about
    chat = ChatFormat(tok)
    prompts = [chat.prompt_ids("You are helpful.", q) for q in QUESTIONS]
    sampling = Sampling(max_new_tokens=10, temperature=0, logprobs=True)
    plain = HFBackend(reference, tok, mode="plain").generate(prompts, sampling)
    lean = HFBackend(prepared, tok, mode="lean", max_cache_len=256, graph_max_new=16)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the trainer's own autocast around generation, too
        got = lean.generate(prompts, sampling)
    assert [g.ids for g in got] == [p.ids for p in plain]
    for g, p in zip(got, plain, strict=True):
        assert g.logprobs == pytest.approx(p.logprobs, abs=1e-4)
    (slot,) = lean._decoder.slots.values()
    assert {layer.keys.dtype for layer in slot.cache.layers} == {torch.float32}
    assert {layer.values.dtype for layer in slot.cache.layers} == {torch.float32}


def test_decoder_stops_once_every_live_row_has_sampled_eos():
    """With an EOS id the loop ends at the first check after every live row sampled it (dummy bucket rows
    never hold it up), and what it returns is the prefix of the full decode; `max_new` bounds the loop."""
    from fathom.rollout.graph_decode import CHECK_EVERY, GraphDecoder

    path = tiny_model_dir("tiny-qwen")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    chat = ChatFormat(tok)
    prompt = torch.tensor([chat.prompt_ids("You are helpful.", QUESTIONS[2])])
    ids = torch.cat([prompt, prompt])  # row 1 is bucket padding (live_rows=1)
    attention = torch.ones_like(ids)
    decoder = GraphDecoder(model, max_cache_len=256, max_new_tokens=4 * CHECK_EVERY)
    torch.manual_seed(0)  # sampled (a random tiny model repeats one token when greedy); same seed, same draws
    full, full_lp = decoder.decode(ids, attention, 1.0)
    assert full.shape == (2, 4 * CHECK_EVERY)
    row = full[0].tolist()
    k = next(k for k in range(1, len(row)) if row[k] not in row[:k])  # a token first sampled at step k + 1
    assert k < CHECK_EVERY - 1
    torch.manual_seed(0)
    early, early_lp = decoder.decode(ids, attention, 1.0, eos_id=row[k], live_rows=1)
    assert early.shape == (2, CHECK_EVERY)  # stopped at the first check, not after 4 * CHECK_EVERY steps
    assert torch.equal(early[0], full[0, :CHECK_EVERY])
    assert torch.allclose(early_lp[0], full_lp[0, :CHECK_EVERY])
    torch.manual_seed(0)
    short, _ = decoder.decode(ids, attention, 1.0, max_new=5)
    assert torch.equal(short, full[:, :5])
    with pytest.raises(ValueError, match="max_new"):
        decoder.decode(ids, attention, 0.0, max_new=4 * CHECK_EVERY + 1)
