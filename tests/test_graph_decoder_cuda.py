"""The CUDA-graph decoder on a GPU: replayed graphs compute what plain `generate` computes, see the weights'
in-place updates and keep PEFT's adapter state apart (a graph freezes the branch its LoRA layers took).

Skipped without CUDA (here and in CI); on the lent GPU, with tiny-smol buildable (scripts/gpu/ stages it):
    python3 -m pytest tests/test_graph_decoder_cuda.py -q
"""

from __future__ import annotations

import pytest
import torch

from fathom.rollout import ChatFormat, HFBackend, Sampling

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

QUESTIONS = ["What is 2+2?", "Name a color.", "Write a python loop over a list.", "Capital of France?"]
GREEDY = Sampling(max_new_tokens=16, temperature=0, logprobs=True)


def _lora_tiny_cuda():
    """tiny-smol in float32 on the GPU with a LoRA adapter that changes its outputs (B starts at zero)."""
    from fathom.models import LoraSpec, ModelSpec, load_model

    torch.manual_seed(0)
    spec = ModelSpec(
        name="tiny-smol", dtype="float32", lora=LoraSpec(r=4, alpha=64, dropout=0.0), device="cuda"
    )
    model, tok = load_model(spec)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model, tok


def _ids(gens):
    return [g.ids for g in gens]


def _same(graph, plain) -> None:
    assert _ids(graph) == _ids(plain)
    for g, p in zip(graph, plain, strict=True):
        assert g.logprobs == pytest.approx(p.logprobs, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize("fuse", [False, True], ids=["captured", "fused"])
def test_graph_decoder_on_cuda_matches_plain_through_updates_and_adapter_states(fuse):
    model, tok = _lora_tiny_cuda()
    chat = ChatFormat(tok)
    prompts = [chat.prompt_ids("You are helpful.", q) for q in QUESTIONS]  # different lengths: left padding
    assert len({len(p) for p in prompts}) > 1
    plain = HFBackend(model, tok, mode="plain")
    graph = HFBackend(model, tok, mode="graph", max_cache_len=256, graph_max_new=16, fuse=fuse)

    # (a) the captured graph (adapters on) decodes what plain generate decodes
    before = graph.generate(prompts, GREEDY)
    _same(before, plain.generate(prompts, GREEDY))
    assert graph._decoder.captures == 1

    # (b) an optimizer step updates the weights in place: the same graph, replayed, sees the new weights
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    pointers = [p.data_ptr() for p in lora]
    optimizer = torch.optim.AdamW(lora, lr=0.5)
    model.train()
    batch = torch.tensor([prompts[0]], device="cuda")
    loss = model(input_ids=batch).logits.float().log_softmax(-1)[..., 0].mean()  # any loss that moves LoRA
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    assert [p.data_ptr() for p in lora] == pointers  # in place: what the graph reads by address
    after = graph.generate(prompts, GREEDY)
    reference = plain.generate(prompts, GREEDY)
    assert _ids(reference) != _ids(before)  # the step changed the greedy outputs...
    _same(after, reference)  # ...and the replayed graph follows them (no stale weights)
    assert graph._decoder.captures == 1  # replayed, not recaptured

    # (c) under disable_adapter() the base model answers, from a graph of its own
    with model.disable_adapter():
        base = graph.generate(prompts, GREEDY)
        base_reference = plain.generate(prompts, GREEDY)
    assert _ids(base_reference) != _ids(reference)
    _same(base, base_reference)
    assert graph._decoder.captures == 2
    # and the adapter's graph is still the adapter's once they are back on
    _same(graph.generate(prompts, GREEDY), reference)
    assert graph._decoder.captures == 2
