"""The repetition penalty of `Sampling`: HF generate's own penalty in `HFBackend` (greedy included, left
padding not counted as seen tokens), nothing changed at 1.0, bad values refused, and vLLM's parameter."""

from __future__ import annotations

import pytest
import torch

from fathom.models import ModelSpec, load_model
from fathom.rollout import HFBackend, Sampling


@pytest.fixture(scope="module")
def tiny():
    model, tok = load_model(ModelSpec(name="tiny-smol"))
    return model, tok, tok.encode("hello world, the the the")


def hf_reference(model, backend: HFBackend, prompt: list[int], new: int, **kwargs) -> list[int]:
    """transformers' own greedy `generate` on one unpadded prompt, cut as the backend cuts."""
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
        pad_token_id=backend.pad_id, eos_token_id=backend.eos_id, **kwargs,
    )  # fmt: skip
    return backend._cut(out[0, len(prompt) :].tolist(), Sampling())[0]


def test_greedy_penalty_is_hf_generates_own(tiny):
    model, tok, prompt = tiny
    backend = HFBackend(model, tok)
    off = backend.generate([prompt], Sampling(max_new_tokens=24, temperature=0))[0].ids
    on = backend.generate([prompt], Sampling(max_new_tokens=24, temperature=0, repetition_penalty=1.3))[0].ids
    assert off == hf_reference(model, backend, prompt, 24)  # 1.0: today's ids
    assert on == hf_reference(model, backend, prompt, 24, repetition_penalty=1.3)
    assert on != off and len(off) == len(on) == 24


def test_a_padded_row_decodes_as_it_does_alone(tiny):
    model, tok, prompt = tiny
    short = tok.encode("ab")
    with torch.no_grad():
        first = int(model(torch.tensor([short])).logits[0, -1].argmax())
    assert first not in short
    backend = HFBackend(model, tok)
    backend.pad_id = first  # were padding counted as seen tokens, the short row's first pick would change
    greedy = Sampling(max_new_tokens=4, temperature=0, repetition_penalty=3.0)
    (alone,) = backend.generate([short], greedy)
    _, padded = backend.generate([prompt, short], greedy)
    assert alone.ids[0] == first and padded.ids == alone.ids


@pytest.mark.parametrize("penalty", [0.0, -1.2])
def test_a_penalty_that_is_not_positive_is_refused(penalty):
    with pytest.raises(ValueError, match="repetition_penalty must be > 0"):
        Sampling(repetition_penalty=penalty)


def test_vllm_sampling_params_carry_the_penalty():
    pytest.importorskip("vllm")
    from fathom.rollout.service import sampling_params

    assert sampling_params(Sampling(repetition_penalty=1.15)).repetition_penalty == 1.15
    assert sampling_params(Sampling()).repetition_penalty == 1.0
