"""A lean batched decoder: transformers' static KV cache, one CUDA graph per batch bucket.

Why: `generate` spends most of a decode step in Python (logits processors, stopping checks that sync the
GPU every step) and in hundreds of small kernel launches; at rollout batch sizes a small model's step is
then 10-20x above its memory-bandwidth floor. Here the whole decode step — the model's forward over a
`StaticCache`, temperature sampling (Gumbel-max) and the bookkeeping of positions and masks — is captured
once as a CUDA graph and replayed, with no host sync until the end (EOS is cut on the host afterwards).

Shapes never change after capture: the batch is padded to a bucket, the cache has a fixed length, and the
step's varying inputs (position, next token, the mask column) live in device buffers the graph reads. The
prefill runs eagerly (its length varies). With ``capture=False`` (always on a CPU; ``mode="lean"`` on a GPU)
the same step runs eagerly, uncaptured: still no per-step host sync or logits processors, and greedy
decoding matches `generate` token for token. Decoding stops early once every live row has sampled EOS
(checked every `CHECK_EVERY` steps, the only host syncs of the loop).

The model is called through its own ``forward``, under autocast switched off: accelerate wraps a prepared
model's ``forward`` in bf16 autocast (kept by the unwrapping TRL does for generation), which would put fp32
rotated keys and bf16 values into one static cache. The decoder runs in the weights' own dtypes instead.

A graph reads the weights by address, so in-place optimizer steps are seen by the next replay; but it also
freezes every Python branch the forward took at capture, such as whether PEFT's LoRA layers were switched
off (`model.disable_adapter()`): a slot is therefore kept per adapter state too (`adapters_enabled`).
Capturing a PEFT model is refused for now: on the H200 its captured step's log-probs were wrong (up to 8.5
nats off the eager model's); without adapters they were off by ~2.7e-3 (float32), cause not yet found.

This module decodes only; `fathom.rollout.backends.HFBackend(mode="graph")` wraps it behind the backend
interface (stopping at EOS, log-probs, stop strings).
"""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass
from typing import Any

DECODE_ATTENTION = "fathom_gqa_decode"
CACHE_BUCKETS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
CHECK_EVERY = 16  # decode steps between the host's looks at "has every row sampled EOS?"


def raw_forward(model: Any) -> Any:
    """`model`'s forward without accelerate's mixed-precision wrapper (autocast + fp32 outputs), if it has one.

    accelerate keeps the original bound method as ``_original_forward`` when it wraps; a model it never
    prepared is returned as is (called through ``__call__``, hooks and all)."""
    original = model.__dict__.get("_original_forward")
    return original if original is not None else model


def gqa_attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None, **_: Any
) -> tuple[Any, None]:
    """Attention that reads each key/value head once for its whole group of query heads.

    transformers' SDPA path (in the releases on our GPU image) copies every KV head `n_rep` times before
    attending, once per layer per step, and with a padding mask it drops to a kernel that materialises it:
    at batch 256 that copy, not the model, dominated the decode step. Here the query heads are grouped under
    their KV head instead (head h uses KV head h // n_rep, as in `repeat_kv`).
    """
    import torch

    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    q = query.reshape(batch, kv_heads, group * q_len, dim)
    scores = torch.matmul(q, key.transpose(-1, -2)) * (scaling if scaling is not None else dim**-0.5)
    if attention_mask is not None:
        mask = attention_mask[:, :, :, : key.shape[-2]]  # (B, 1, q_len, L) -> rows ordered (group, q)
        mask = (
            mask.unsqueeze(2)
            .expand(batch, 1, group, q_len, mask.shape[-1])
            .reshape(batch, 1, group * q_len, -1)
        )
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + mask
    probs = scores.float().softmax(-1).to(value.dtype)
    out = torch.matmul(probs, value).reshape(batch, heads, q_len, dim)
    return out.transpose(1, 2).contiguous(), None


def _register_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(DECODE_ATTENTION, gqa_attention)


def cache_bucket(needed: int, ceiling: int) -> int:
    """The smallest cache length bucket that holds `needed` positions (at most `ceiling`)."""
    if needed > ceiling:
        raise ValueError(f"{needed} positions exceed the cache ceiling {ceiling}")
    return min([b for b in CACHE_BUCKETS if needed <= b <= ceiling] or [ceiling])


_TUNER_LAYERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # model -> layer or None


def _tuner_layer(model: Any) -> Any:
    """The first PEFT tuner layer of `model` (None without adapters), looked up once per model."""
    if model not in _TUNER_LAYERS:
        try:
            from peft.tuners.tuners_utils import BaseTunerLayer
        except ImportError:  # no PEFT installed: no adapters
            _TUNER_LAYERS[model] = None
        else:
            _TUNER_LAYERS[model] = next((m for m in model.modules() if isinstance(m, BaseTunerLayer)), None)
    return _TUNER_LAYERS[model]


def adapters_enabled(model: Any) -> bool:
    """Whether `model`'s PEFT adapters are switched on now; True for a model without adapters.

    Why it matters: a captured graph replays whichever branch PEFT's layers took at capture time, so a graph
    captured with adapters on would keep applying them inside `model.disable_adapter()` (and one captured
    inside it would sample from the base model while the adapter trains). PEFT switches all its tuner layers
    together, so the first one tells; which module that is is looked up once per model. (Not a
    `hasattr(m, "disable_adapters")` search: transformers models have a `disable_adapters()` method too.)
    """
    layer = _tuner_layer(model)
    return layer is None or not layer.disable_adapters


@dataclass
class _Slot:
    """Everything one captured graph reads and writes (fixed addresses)."""

    cache: Any
    mask: Any  # (B, 1, 1, L) bool: which cache positions each row attends to
    next_ids: Any  # (B, 1) the token fed to the next step
    positions: Any  # (B, 1) rope positions
    cache_pos: Any  # (1,) the cache slot written this step
    step: Any  # (1,) index of the output column written this step
    out: Any  # (B, max_new) sampled ids
    logprobs: Any  # (B, max_new) log-prob of each sampled id under the temperature-scaled distribution
    inv_temp: Any  # (1,) 1 / temperature (0 -> greedy)
    eos: Any  # (1,) the EOS id (-1: none, never done)
    done: Any  # (B,) bool: the row has sampled EOS (dummy rows start done)
    graph: Any = None


class GraphDecoder:
    def __init__(
        self,
        model: Any,
        max_cache_len: int,
        max_new_tokens: int,
        capture: bool | None = None,
        fuse: bool = False,
    ) -> None:
        """`fuse`: compile the step's forward with inductor (fusing its many small kernels) before capture;
        costs a compilation per shape at warm-up, then replays as one graph like the unfused step."""
        import torch

        if fuse:
            from torch._inductor import config as inductor_config

            if inductor_config.freezing:
                # Freezing folds the weights into the compiled code as constants: the optimizer's in-place
                # updates would never reach the rollouts. Without it (the default) inductor reads them as inputs.
                raise ValueError("fuse=True needs inductor's freezing off (TORCHINDUCTOR_FREEZING=0)")

        self.model, self.max_cache_len, self.max_new = model, max_cache_len, max_new_tokens
        self.device = next(model.parameters()).device
        self.capture = self.device.type == "cuda" if capture is None else capture
        if self.capture and self.device.type != "cuda":
            raise ValueError("capture=True needs the model on a CUDA device")
        if self.capture and _tuner_layer(model) is not None:
            # Measured on the H200 (bench/RESULTS.md): with a LoRA adapter the captured step's log-probs were
            # off by up to 8.5 nats from the eager model's (bf16 SmolLM2, LoRA r=32) and 0.85 (fp32 tiny model),
            # against ~1e-6 for the same step uncaptured. Until that is understood, no capture with adapters.
            raise ValueError(
                "capturing the decode step of a PEFT model computes wrong log-probs (bench/RESULTS.md): "
                "use mode='lean' (the same loop, uncaptured), or merge the adapter first"
            )
        self._call = raw_forward(model)
        # One side stream for every warm-up and capture: cuBLAS keeps a workspace per stream, and a capture
        # on a stream other than the warm-up's would make it set one up inside the graph.
        self._stream = torch.cuda.Stream(self.device) if self.capture else None
        self._forward = (
            torch.compile(self._decode_forward, dynamic=False, fullgraph=False)
            if fuse
            else self._decode_forward
        )
        # (batch bucket, cache-length bucket, adapters enabled) -> buffers and graph
        self.slots: dict[tuple[int, int, bool], _Slot] = {}
        _register_attention()
        self.captures = 0  # graphs captured so far; must stop growing after warm-up (no recompiles)
        self._torch = torch

    def _slot(self, batch: int, cache_len: int) -> _Slot:
        key = (batch, cache_len, adapters_enabled(self.model))
        if key in self.slots:
            return self.slots[key]
        torch = self._torch
        from transformers import StaticCache

        dev = self.device
        slot = _Slot(
            cache=StaticCache(config=self.model.config, max_cache_len=cache_len),
            mask=torch.zeros(batch, 1, 1, cache_len, dtype=torch.bool, device=dev),
            next_ids=torch.zeros(batch, 1, dtype=torch.long, device=dev),
            positions=torch.zeros(batch, 1, dtype=torch.long, device=dev),
            cache_pos=torch.zeros(1, dtype=torch.long, device=dev),
            step=torch.zeros(1, dtype=torch.long, device=dev),
            out=torch.zeros(batch, self.max_new, dtype=torch.long, device=dev),
            logprobs=torch.zeros(batch, self.max_new, dtype=torch.float32, device=dev),
            inv_temp=torch.ones(1, dtype=torch.float32, device=dev),
            eos=torch.full((1,), -1, dtype=torch.long, device=dev),
            done=torch.zeros(batch, dtype=torch.bool, device=dev),
        )
        self.slots[key] = slot
        return slot

    def _sample(self, logits: Any, slot: _Slot) -> tuple[Any, Any]:
        """Gumbel-max sampling at temperature 1/inv_temp (argmax when inv_temp is 0): no host sync."""
        torch = self._torch
        logits = logits.float()
        greedy = slot.inv_temp == 0
        scaled = logits * torch.where(greedy, torch.ones_like(slot.inv_temp), slot.inv_temp)
        gumbel = -torch.empty_like(scaled).exponential_().log()
        choice = torch.where(greedy, scaled, scaled + gumbel).argmax(-1, keepdim=True)
        logp = scaled.log_softmax(-1).gather(-1, choice)
        return choice, logp

    def _step(self, slot: _Slot) -> None:
        """One decode step; every tensor it touches is a slot buffer (so it can be captured)."""
        slot.mask.index_fill_(3, slot.cache_pos, True)
        config = self.model.config
        saved, config._attn_implementation = config._attn_implementation, DECODE_ATTENTION
        try:
            logits = self._forward(slot.next_ids, slot.mask, slot.positions, slot.cache, slot.cache_pos)
        finally:
            config._attn_implementation = saved
        choice, logp = self._sample(logits, slot)
        slot.out.index_copy_(1, slot.step, choice)
        slot.logprobs.index_copy_(1, slot.step, logp)
        slot.done.logical_or_(choice[:, 0] == slot.eos)
        slot.next_ids.copy_(choice)
        slot.positions.add_(1)
        slot.cache_pos.add_(1)
        slot.step.add_(1)

    def _decode_forward(self, next_ids: Any, mask: Any, positions: Any, cache: Any, cache_pos: Any) -> Any:
        return self._call(
            input_ids=next_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            cache_position=cache_pos,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1, :]

    def _capture(self, slot: _Slot) -> None:
        torch = self._torch
        state = (slot.mask, slot.next_ids, slot.positions, slot.cache_pos, slot.step, slot.done)
        saved = [t.clone() for t in state]
        stream = self._stream
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):  # warm-up outside the graph (allocator, lazy kernels, compilation)
                self._step(slot)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        # No garbage collection during the capture: a dead decoder's graph freed mid-capture calls
        # cudaGraphExecDestroy, which is illegal while a stream captures; it invalidated the capture and the
        # next cuBLAS call failed (CUBLAS_STATUS_EXECUTION_FAILED, seen on the H200). Collect first instead.
        gc.collect()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            with torch.cuda.graph(graph, stream=stream):
                self._step(slot)
        finally:
            if was_enabled:
                gc.enable()
        for buf, value in zip(state, saved, strict=True):
            buf.copy_(value)
        slot.graph = graph
        self.captures += 1

    def decode(
        self,
        input_ids: Any,
        attention: Any,
        temperature: float,
        max_new: int | None = None,
        eos_id: int | None = None,
        live_rows: int | None = None,
    ) -> tuple[Any, Any]:
        """Left-padded (B, W) prompts -> ((B, n) ids, (B, n) log-probs) on the host, n <= `max_new`.

        `max_new`: new tokens wanted (default: the decoder's maximum). `eos_id`: stop once each of the first
        `live_rows` rows (default: all; the rest are bucket padding) has sampled it; n is then where the
        loop stopped, and every live row has its EOS within its n ids. Ids after a row's EOS are garbage.
        """
        torch = self._torch
        batch, width = input_ids.shape
        steps = self.max_new if max_new is None else max_new
        if not 1 <= steps <= self.max_new:
            raise ValueError(f"max_new must be in [1, {self.max_new}], got {steps}")
        if width + self.max_new > self.max_cache_len:
            raise ValueError(
                f"prompt {width} + {self.max_new} new tokens exceeds the cache ({self.max_cache_len})"
            )
        slot = self._slot(batch, cache_bucket(width + self.max_new, self.max_cache_len))
        slot.cache.reset()
        slot.inv_temp.fill_(0.0 if temperature <= 0 else 1.0 / temperature)
        slot.eos.fill_(-1 if eos_id is None else eos_id)
        live = batch if live_rows is None else live_rows
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        # Autocast off, and the model's own forward (`raw_forward`): the trainer generates inside its bf16
        # autocast, and accelerate's prepared model enters it again in its wrapped `forward`; either mixes
        # dtypes in the static cache (fp32 rotated keys, bf16 values: an index_copy_ error, transformers 5.17).
        with torch.no_grad(), torch.autocast(self.device.type, enabled=False):
            # Prefill (eager; its width varies): the 2-D mask lets transformers build the causal+padding mask.
            logits = self._call(
                input_ids=input_ids,
                attention_mask=attention,
                position_ids=positions,
                past_key_values=slot.cache,
                cache_position=torch.arange(width, device=self.device),
                use_cache=True,
                logits_to_keep=1,  # (B, W, V) logits would not fit for long prompts; only the last is needed
            ).logits[:, -1, :]
            slot.mask.zero_()
            slot.mask[:, 0, 0, :width] = attention.bool()
            first, first_logp = self._sample(logits, slot)
            slot.out[:, :1].copy_(first)
            slot.logprobs[:, :1].copy_(first_logp)
            slot.next_ids.copy_(first)
            slot.positions.copy_(positions[:, -1:] + 1)
            slot.cache_pos.fill_(width)
            slot.step.fill_(1)
            slot.done.copy_(first[:, 0] == slot.eos)
            slot.done[live:] = True
            if self.capture and slot.graph is None:
                self._capture(slot)
            n = 1
            while n < steps:
                if slot.graph is not None:
                    slot.graph.replay()
                else:
                    self._step(slot)
                n += 1
                if eos_id is not None and n % CHECK_EVERY == 0 and bool(slot.done.all()):
                    break
        return slot.out[:, :n].cpu(), slot.logprobs[:, :n].cpu()
