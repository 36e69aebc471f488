"""Generation backends behind one small interface: ``generate(prompts_ids, sampling) -> generations``.

- `HFBackend`: transformers `generate` on left-padded batches. ``mode="plain"`` is the reference path (and
  the CPU path); ``mode="static"`` uses transformers' static KV cache (the decode step is compiled with CUDA
  graphs on a GPU) with the batch padded to a few fixed sizes and the cache to a fixed length, so shapes
  repeat and nothing recompiles inside a training or eval loop after warm-up.
- `VLLMBackend`: a vLLM engine (``vllm.LLM``) for whole batches (the direct baseline); the rollout engine
  drives the same engine with continuous batching through `fathom.rollout.service.VLLMService`.

A backend returns the sampled ids verbatim (cut after the first stop token), whether the model finished
on its own, and per-token log-probs when asked. It holds no conversation state; `fathom.rollout.engine`
does. Generation is serialised by a lock: policy turns and `llm()` sub-calls share one model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
MODES = ("plain", "static")
LENGTH_BUCKET = 256


@dataclass(frozen=True)
class Sampling:
    max_new_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0  # keep 1.0 / top_k 0 for RL rollouts: truncated sampling biases importance ratios
    top_k: int = 0
    logprobs: bool = False
    stop_strings: tuple[str, ...] = ()
    ignore_eos: bool = False  # always generate max_new_tokens (benchmarks)
    # CTRL-style penalty on every token already in the prompt or the reply (HF's and vLLM's semantics):
    # a seen token's logit is divided by it when positive, multiplied when negative. 1.0 = off.
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not self.repetition_penalty > 0:
            raise ValueError(
                f"repetition_penalty must be > 0 (1.0 = off, > 1 discourages repeats); got {self.repetition_penalty}"
            )


@dataclass(frozen=True)
class Generation:
    ids: list[int]
    finished: bool  # ended on eos / a stop string, not on max_new_tokens
    logprobs: list[float] | None = None


class Backend(Protocol):
    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]: ...


def bucket(n: int, buckets: tuple[int, ...] = BATCH_BUCKETS) -> int:
    for b in buckets:
        if n <= b:
            return b
    return -(-n // buckets[-1]) * buckets[-1]


class HFBackend:
    """transformers generation: plain `generate`, its static-cache path, or our decode loop (lean / graph)."""

    def __init__(self, model: Any, tokenizer: Any, mode: str = "auto", max_cache_len: int = 8192) -> None:
        if mode == "auto":
            mode = "plain"
        if mode not in MODES:
            raise ValueError(f"mode must be 'auto' or one of {MODES}, got {mode!r}")
        self.model, self.tokenizer, self.mode, self.max_cache_len = model, tokenizer, mode, max_cache_len
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_id = tokenizer.eos_token_id
        self.calls = 0
        self._lock = threading.Lock()

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        if not prompts:
            return []
        with self._lock:
            self.calls += 1
            return self._generate(prompts, sampling)

    def _generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        import torch

        rows = len(prompts)
        width = max(len(p) for p in prompts)
        extra: dict[str, Any] = {}
        if self.mode == "static":
            # Fixed shapes: pad the batch with dummy rows and the prompt to a length bucket.
            rows = bucket(rows)
            width = -(-width // LENGTH_BUCKET) * LENGTH_BUCKET
            if width + sampling.max_new_tokens > self.max_cache_len:
                raise ValueError(
                    f"prompt ({width}) + max_new_tokens ({sampling.max_new_tokens}) exceeds the static cache "
                    f"({self.max_cache_len})"
                )
            extra = {"cache_implementation": "static"}
            if self._knows_max_cache_len():
                extra["max_cache_len"] = self.max_cache_len  # one cache size for every call: no recompiles
        device = next(self.model.parameters()).device
        input_ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((rows, width), dtype=torch.long)
        for r in range(rows):
            ids = prompts[r] if r < len(prompts) else prompts[0]
            input_ids[r, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[r, width - len(ids) :] = 1
        do_sample = sampling.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_new_tokens,
            "do_sample": do_sample,
            "pad_token_id": self.pad_id,
            "eos_token_id": self.eos_id,
            "return_dict_in_generate": True,
            "output_scores": sampling.logprobs,
        }
        if do_sample:
            kwargs.update(
                temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None
            )
        if sampling.repetition_penalty != 1.0:  # under greedy too: it reshapes the logits the argmax reads
            # transformers skips each row's left padding (by the attention mask), so a padded row is
            # penalised as the same prompt alone, and as in vLLM: over its prompt and reply tokens only.
            kwargs["repetition_penalty"] = float(sampling.repetition_penalty)
        if sampling.stop_strings:
            kwargs.update(stop_strings=list(sampling.stop_strings), tokenizer=self.tokenizer)
        if sampling.ignore_eos:
            kwargs["min_new_tokens"] = sampling.max_new_tokens
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                out = self.model.generate(
                    input_ids=input_ids.to(device), attention_mask=attention.to(device), **kwargs, **extra
                )
        finally:
            self.model.train(was_training)
        new = out.sequences[: len(prompts), width:].tolist()
        logprob_rows: list[list[float]] | None = None
        if sampling.logprobs:
            scores = torch.stack(out.scores, dim=1)[: len(prompts)].float()  # (B, T, V), processed logits
            chosen = torch.tensor(new, device=scores.device).clamp(min=0)
            logprob_rows = scores.log_softmax(-1).gather(-1, chosen.unsqueeze(-1)).squeeze(-1).tolist()
        results = []
        for r, ids in enumerate(new):
            cut, finished = self._cut(ids, sampling)
            results.append(Generation(cut, finished, logprob_rows[r][: len(cut)] if logprob_rows else None))
        return results

    @staticmethod
    def _knows_max_cache_len() -> bool:
        # transformers >= 5.2x sizes the static cache from generation_config.max_cache_len; older ones keep
        # the largest size seen so far, so warm up with the longest prompt first (see bench/rollout.py).
        from transformers import GenerationConfig

        return hasattr(GenerationConfig(), "max_cache_len")

    def _cut(self, ids: list[int], sampling: Sampling) -> tuple[list[int], bool]:
        """Keep ids up to and including the first eos; for stop strings, up to where the text stops."""
        if self.eos_id in ids:
            return ids[: ids.index(self.eos_id) + 1], True
        if sampling.stop_strings:
            for end in range(1, len(ids) + 1):
                text = self.tokenizer.decode(ids[:end])
                if any(text.rstrip().endswith(s) for s in sampling.stop_strings):
                    return ids[:end], True
        while ids and ids[-1] == self.pad_id:  # rows that finished early are padded after their eos
            ids = ids[:-1]
        return ids, False


class VLLMBackend:
    """A vLLM engine for whole batches; `llm` may be passed in (TRL's colocated engine) or built here."""

    def __init__(
        self,
        model_path: str | None = None,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int = 8192,
        llm: Any = None,
        **engine_kwargs: Any,
    ) -> None:
        if llm is None:
            if model_path is None:
                raise ValueError("VLLMBackend needs a model_path or an engine (llm=...)")
            try:
                from vllm import LLM
            except ImportError as exc:
                raise RuntimeError("VLLMBackend needs vLLM: pip install 'fathom-rlm[vllm]'") from exc
            llm = LLM(
                model=model_path,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                **engine_kwargs,
            )
        self.llm = llm
        self.calls = 0

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        from fathom.rollout.service import generation_of, sampling_params, token_prompt

        if not prompts:
            return []
        self.calls += 1
        params = sampling_params(sampling)
        outputs = self.llm.generate([token_prompt(p) for p in prompts], params, use_tqdm=False)
        return [generation_of(out, sampling.logprobs) for out in outputs]
