"""The decode loop on a GPU: uncaptured ("lean") it computes what the eager model computes, with LoRA adapters
on and off; captured ("graph") it sees the weights' in-place updates, survives dead decoders' graphs and
refuses PEFT models (their captured log-probs were wrong on the H200). The captured step's own ~2.7e-3
log-prob drift from the eager model (float32) is a known, unexplained failure: that test is an xfail.

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


def _tiny_cuda(lora: bool):
    """tiny-smol in float32 on the GPU; with `lora`, an adapter that changes its outputs (B starts at zero)."""
    from fathom.models import LoraSpec, ModelSpec, load_model

    torch.manual_seed(0)
    adapter = LoraSpec(r=4, alpha=64, dropout=0.0) if lora else None
    model, tok = load_model(ModelSpec(name="tiny-smol", dtype="float32", lora=adapter, device="cuda"))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return model, tok


def _scored(model, prompts, gens) -> list[tuple[list[float], list[float]]]:
    """Per generation: each token's log-prob under `model` now, and the best log-prob at that position
    (one eager forward over prompt + output)."""
    scores = []
    for prompt, gen in zip(prompts, gens, strict=True):
        ids = torch.tensor([prompt + gen.ids], device="cuda")
        with torch.no_grad():
            logp = model(input_ids=ids).logits.float().log_softmax(-1)[0]
        rows = logp[len(prompt) - 1 : len(prompt) - 1 + len(gen.ids)]
        chosen = rows.gather(-1, torch.tensor(gen.ids, device="cuda")[:, None])[:, 0]
        scores.append((chosen.tolist(), rows.max(-1).values.tolist()))
    return scores


def _follows(model, prompts, gens) -> None:
    """The decoder's log-probs are the current model's and its greedy picks its argmax (up to float ties:
    a random tiny model is nearly uniform, so comparing ids with another decoder would be fragile)."""
    for gen, (chosen, best) in zip(gens, _scored(model, prompts, gens), strict=True):
        assert gen.logprobs == pytest.approx(chosen, abs=2e-3)
        assert all(c >= b - 1e-3 for c, b in zip(chosen, best, strict=True))


def _moved(model, prompts, gens) -> bool:
    """`gens` no longer score what they scored when decoded: the model changed under them."""
    return any(
        abs(a - b) > 1e-2
        for gen, (chosen, _) in zip(gens, _scored(model, prompts, gens), strict=True)
        for a, b in zip(gen.logprobs, chosen, strict=True)
    )


@pytest.mark.xfail(
    strict=True, reason="captured step ~2.7e-3 from the eager model in float32 on the H200, cause unknown"
)
@pytest.mark.parametrize("fuse", [False, True], ids=["captured", "fused"])
def test_graph_decoder_on_cuda_follows_the_model_through_updates_and_autocast(fuse):
    model, tok = _tiny_cuda(lora=False)
    model.eval()
    chat = ChatFormat(tok)
    prompts = [chat.prompt_ids("You are helpful.", q) for q in QUESTIONS]  # different lengths: left padding
    assert len({len(p) for p in prompts}) > 1
    graph = HFBackend(model, tok, mode="graph", max_cache_len=256, graph_max_new=16, fuse=fuse)

    # (a) the captured graph computes what the model computes
    before = graph.generate(prompts, GREEDY)
    assert graph._decoder.captures == 1
    _follows(model, prompts, before)

    # (b) an optimizer step updates the weights in place: the same graph, replayed, sees the new weights
    params = list(model.parameters())
    pointers = [p.data_ptr() for p in params]
    optimizer = torch.optim.AdamW(params, lr=0.05)
    model.train()
    batch = torch.tensor([prompts[0]], device="cuda")
    loss = model(input_ids=batch).logits.float().log_softmax(-1)[..., 0].mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    assert [p.data_ptr() for p in params] == pointers  # in place: what the graph reads by address
    assert _moved(model, prompts, before)  # the step changed the model...
    after = graph.generate(prompts, GREEDY)
    _follows(model, prompts, after)  # ...and the replayed graph follows it (no stale weights)
    assert graph._decoder.captures == 1  # replayed, not recaptured

    # (c) inside a trainer's bf16 autocast (GRPO generates there) the decoder still runs in the weights' dtype
    with torch.autocast("cuda", dtype=torch.bfloat16):
        in_autocast = graph.generate(prompts, GREEDY)
    _follows(model, prompts, in_autocast)


def test_graph_decoder_refuses_to_capture_a_peft_model():
    model, tok = _tiny_cuda(lora=True)
    chat = ChatFormat(tok)
    graph = HFBackend(model, tok, mode="graph", max_cache_len=256, graph_max_new=16)
    with pytest.raises(ValueError, match="PEFT"):
        graph.generate([chat.prompt_ids("You are helpful.", QUESTIONS[0])], GREEDY)


def test_lean_decoder_on_cuda_follows_the_model():
    """The uncaptured decode loop (mode="lean") against the eager model, LoRA adapters on and off."""
    model, tok = _tiny_cuda(lora=True)
    model.eval()
    chat = ChatFormat(tok)
    prompts = [chat.prompt_ids("You are helpful.", q) for q in QUESTIONS]
    lean = HFBackend(model, tok, mode="lean", max_cache_len=256, graph_max_new=16)
    _follows(model, prompts, lean.generate(prompts, GREEDY))
    with model.disable_adapter():
        _follows(model, prompts, lean.generate(prompts, GREEDY))
    assert lean._decoder.captures == 0


def test_captures_survive_dead_decoders():
    """A decoder dropped in a reference cycle is freed by the garbage collector whenever it runs; if that
    happens during another decoder's capture, destroying its graph invalidates the capture (seen on the
    H200 as CUBLAS_STATUS_EXECUTION_FAILED on a fifth capture). Captures must survive a stream of them."""
    model, tok = _tiny_cuda(lora=False)
    model.eval()
    chat = ChatFormat(tok)
    prompts = [chat.prompt_ids("You are helpful.", q) for q in QUESTIONS]
    first: dict[int, list[int]] = {}
    for batch in (4, 4, 1, 2, 4, 4, 1, 4):
        backend = HFBackend(model, tok, mode="graph", max_cache_len=256, graph_max_new=16)
        out = [g.ids for g in backend.generate([prompts[0]] * batch, GREEDY)]
        assert backend._decoder.captures == 1
        first.setdefault(batch, out[0])
        assert out == [first[batch]] * batch  # greedy, one prompt: the same in every row and every decoder
        del backend
