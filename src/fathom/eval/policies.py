"""The policies `fathom eval` runs, each turning a batch of tasks into one eval row per task.

- `ExpertPolicy`: the scripted expert through the rollout engine (`expert_backend`), its `llm()` calls read
  by `expert_reader`; the upper bound, and a check of the scaffold itself.
- `TeacherPolicy`: the teacher (`fathom.policies.teacher`: it knows only the conversation) through the same
  engine, its `llm()` calls read by `teacher_reader`; each row also says whether its code was grounded.
- `DirectPolicy`: a model answering from its context window alone (`fathom.rollout.direct`).
- `RLMPolicy`: a model in the REPL scaffold (`RolloutEngine`), answering its own `llm()` calls through
  `EngineSubLM`. Its whole conversation — first prompt, turns and REPL replies — must fit the same context
  window, and so must each sub-call, so it never reads more at once than the direct baseline does.

Every row holds: id, family, length_tokens, difficulty, answer, gold, correct, score, reward, breakdown,
turns, tokens (policy tokens generated), llm_calls, context_used (the longest sequence the policy
conditioned on: prompt plus everything after it), cost_tokens (every token any model read or wrote:
the policy's prompt at each turn, its output, and the sub-LM's input and output — estimated at 4
characters a token where the sub-LM gives no count, as the expert's scripted reader does), end_reason, and
wall_s (the batch's wall time shared evenly among its tasks: episodes of a batch run together). Policies
in the scaffold add ``trace`` (every turn, cell and sub-call), which the runner writes to its own file.

Context windows assumed per model (override with ``context_tokens``): `CONTEXT_WINDOWS` below for the
offline names and for checkpoints of runs trained from them (found through the run's ``config.toml``);
otherwise the checkpoint's ``max_position_embeddings``.

This module neither writes files nor aggregates rows; see `fathom.eval.runner` and `fathom.eval.stats`.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fathom.env import EnvConfig, RLMEnvironment, SubLM, SubLMReply, SubLMRequest
from fathom.env.prompts import first_user_message, system_prompt
from fathom.models import ModelSpec, load_model, load_tokenizer
from fathom.policies.expert import EXPERTS
from fathom.policies.grounding import check_trace
from fathom.policies.readers import expert_reader, teacher_reader
from fathom.policies.scripted import expert_backend
from fathom.policies.teacher import teacher_backend
from fathom.rollout import ChatFormat, EngineSubLM, HFBackend, Rollout, RolloutConfig, RolloutEngine, Sampling
from fathom.rollout.direct import run_direct
from fathom.tasks import Task

# The context window each offline model is evaluated with. The tiny random models have 32K positions, but
# stand in for a small model with a 2K window, so that 8K-128K documents are 4-64x what fits.
CONTEXT_WINDOWS = {"tiny-smol": 2048, "tiny-qwen": 2048, "smollm2-135m": 8192}
CHARS_PER_TOKEN = 4  # estimate for sub-LM text that comes with no token count


class Policy(Protocol):
    label: str

    def describe(self) -> dict[str, Any]:
        """What identifies this policy's results (policy, model, context...), for eval_config.json."""
        ...

    def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]: ...


def base_row(task: Task, breakdown: dict[str, Any] | None, answer: Any) -> dict[str, Any]:
    """The fields every policy's row shares; a missing breakdown (a crashed episode) scores zero."""
    b = breakdown or {}
    return {
        "id": task.id,
        "family": task.family,
        "length_tokens": task.length_tokens,
        "difficulty": task.difficulty,
        "answer": answer,
        "gold": task.answer,
        "correct": bool(b.get("correct", False)),
        "score": float(b.get("score", 0.0)),
        "reward": float(b.get("total", 0.0)),
        "breakdown": breakdown,
    }


def load_policy_model(name: str, dtype: str = "float32", device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) for an offline name, a hub id, a model directory or a LoRA adapter directory."""
    path = Path(name).expanduser()
    if (path / "adapter_config.json").exists() and not (path / "config.json").exists():
        from peft import PeftModel

        base = json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
        model, tokenizer = load_model(ModelSpec(name=base, dtype=dtype, device=device))
        if (path / "tokenizer_config.json").exists():  # the tokenizer saved with the adapter wins
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path)
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
        return PeftModel.from_pretrained(model, path).merge_and_unload(), tokenizer
    return load_model(ModelSpec(name=name, dtype=dtype, device=device))


def trained_from(name: str) -> str | None:
    """The model a checkpoint of a FATHOM run was trained from: ``[model] name`` of the ``config.toml``
    in the checkpoint's directory or one of the three above it (RUN/final/merged, RUN/checkpoint-N)."""
    path = Path(name).expanduser()
    if not path.is_dir():
        return None
    for folder in [path, *path.resolve().parents][:4]:
        if (folder / "config.toml").is_file():
            config = tomllib.loads((folder / "config.toml").read_text())
            return config.get("model", {}).get("name") or None
    return None


def context_window(name: str, model: Any) -> int:
    """`CONTEXT_WINDOWS` for offline names and checkpoints trained from them, else the model's positions."""
    for candidate in (name, trained_from(name)):
        if candidate in CONTEXT_WINDOWS:
            return CONTEXT_WINDOWS[candidate]
    return int(model.config.max_position_embeddings)


def short_name(model: str) -> str:
    return Path(model).name if ("/" in model and Path(model).expanduser().exists()) else model


class _CountingSubLM:
    """Forwards one episode's `llm()` calls and counts them, with the tokens the sub-LM read and wrote."""

    def __init__(self, inner: SubLM) -> None:
        self.inner, self.calls, self.tokens = inner, 0, 0

    async def complete(self, requests: Sequence[SubLMRequest]) -> list[SubLMReply]:
        replies = await self.inner.complete(requests)
        self.calls += len(requests)
        for req, rep in zip(requests, replies, strict=True):
            self.tokens += rep.prompt_tokens or math.ceil(req.chars / CHARS_PER_TOKEN)
            self.tokens += rep.completion_tokens or math.ceil(len(rep.text) / CHARS_PER_TOKEN)
        return replies


def _policy_read_tokens(rollout: Rollout) -> int:
    """Tokens the policy conditioned on over all its turns: the prompt plus everything before each turn."""
    total, mask = 0, rollout.env_mask
    for i, m in enumerate(mask):
        if m == 1 and (i == 0 or mask[i - 1] == 0):  # a model turn starts here
            total += len(rollout.prompt_ids) + i
    return total


def _final_answer(rollout: Rollout) -> Any:
    return next(
        (t["answer"] for t in reversed(rollout.trace.get("turns", [])) if t.get("answer") is not None), None
    )


@dataclass
class _EngineRunner:
    """Runs tasks through a `RolloutEngine` and turns each rollout into a row."""

    backend: Any
    chat: ChatFormat
    config: RolloutConfig
    env_config: EnvConfig
    sub_lm: SubLM
    engine_sub_lm: EngineSubLM | None = None
    counters: list[_CountingSubLM] = field(default_factory=list)

    def _env(self) -> RLMEnvironment:
        counter = _CountingSubLM(self.sub_lm)
        self.counters.append(counter)
        return RLMEnvironment(self.env_config, sub_lm=counter)

    def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        self.counters = []
        engine = RolloutEngine(self.backend, self.chat, self._env, self.config, sub_lm=self.engine_sub_lm)
        started = time.perf_counter()
        rollouts = asyncio.run(engine.run(list(tasks)))
        wall = (time.perf_counter() - started) / max(1, len(tasks))
        # The engine makes one environment per task, in task order.
        if len(self.counters) != len(tasks):
            raise RuntimeError(f"expected {len(tasks)} environments, the engine made {len(self.counters)}")
        rows = []
        for task, rollout, counter in zip(tasks, rollouts, self.counters, strict=True):
            row = base_row(task, rollout.breakdown, _final_answer(rollout))
            tokens = sum(rollout.env_mask)
            row.update(
                turns=rollout.turns,
                tokens=tokens,
                llm_calls=counter.calls,
                cost_tokens=_policy_read_tokens(rollout) + tokens + counter.tokens,
                context_used=len(rollout.prompt_ids) + len(rollout.completion_ids),
                end_reason=rollout.end_reason,
                wall_s=round(wall, 4),
                trace=rollout.trace,  # the runner moves it to traces.jsonl
            )
            rows.append(row)
        return rows


class ExpertPolicy:
    """The scripted expert in the scaffold; `tokenizer_name` only turns its text into ids."""

    def __init__(self, tokenizer_name: str = "tiny-smol", max_turns: int = 12) -> None:
        self.label, self.tokenizer_name, self.max_turns = "expert", tokenizer_name, max_turns
        self.chat = ChatFormat(load_tokenizer(ModelSpec(name=tokenizer_name)))

    def describe(self) -> dict[str, Any]:
        return {"policy": "expert", "label": self.label, "model": None, "max_turns": self.max_turns}

    def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        unknown = sorted({t.family for t in tasks} - set(EXPERTS))
        if unknown:
            raise ValueError(f"the expert has no script for famil(ies) {', '.join(unknown)}")
        # The expert is not context-limited; budgets are only there to end a broken episode.
        config = RolloutConfig(max_turns=self.max_turns, max_total_tokens=1 << 20)
        runner = _EngineRunner(
            expert_backend(self.chat, tasks),
            self.chat,
            config,
            EnvConfig(max_iterations=self.max_turns),
            expert_reader(),
        )
        return runner.run(tasks)


class TeacherPolicy:
    """The teacher in the scaffold: any task (it needs no family); `tokenizer_name` only makes ids."""

    def __init__(self, tokenizer_name: str = "tiny-smol", max_turns: int = 12, seed: int = 0) -> None:
        self.label, self.tokenizer_name = "teacher", tokenizer_name
        self.max_turns, self.seed = max_turns, seed
        self.chat = ChatFormat(load_tokenizer(ModelSpec(name=tokenizer_name)))

    def describe(self) -> dict[str, Any]:
        return {"policy": "teacher", "label": self.label, "model": None, "max_turns": self.max_turns}

    def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        config = RolloutConfig(max_turns=self.max_turns, max_total_tokens=1 << 20)
        runner = _EngineRunner(
            teacher_backend(self.chat, self.seed),
            self.chat,
            config,
            EnvConfig(max_iterations=self.max_turns),
            teacher_reader(),
        )
        rows = runner.run(tasks)
        for row in rows:
            row["grounded"] = check_trace(row["trace"]).ok
        return rows


class DirectPolicy:
    """A model answering from the document cut to its context window."""

    def __init__(
        self,
        model: str,
        context_tokens: int | None = None,
        sampling: Sampling | None = None,
        dtype: str = "float32",
        device: str | None = None,
        label: str | None = None,
        generation_mode: str = "auto",
    ) -> None:
        self.model_name = model
        self.model, self.tokenizer = load_policy_model(model, dtype, device)
        self.chat = ChatFormat(self.tokenizer)
        self.backend = HFBackend(self.model, self.tokenizer, mode=generation_mode)
        self.context_tokens = context_tokens or context_window(model, self.model)
        self.sampling = sampling or Sampling(max_new_tokens=128, temperature=0.0)
        self.label = label or f"direct:{short_name(model)}"

    def describe(self) -> dict[str, Any]:
        return {
            "policy": "direct",
            "label": self.label,
            "model": self.model_name,
            "context_tokens": self.context_tokens,
            "max_new_tokens": self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
        }

    def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        started = time.perf_counter()
        results = run_direct(
            self.backend, self.chat, tasks, self.context_tokens, self.sampling, batch_size=len(tasks)
        )
        wall = (time.perf_counter() - started) / max(1, len(tasks))
        rows = []
        for task, res in zip(tasks, results, strict=True):
            row = base_row(task, res.breakdown.to_dict(), res.answer)
            row.update(
                turns=1,
                tokens=res.completion_tokens,
                llm_calls=0,
                cost_tokens=res.prompt_tokens + res.completion_tokens,
                context_used=res.prompt_tokens + res.completion_tokens,
                end_reason=res.end_reason,
                wall_s=round(wall, 4),
                answer_source=res.answer_source,
                doc_tokens_kept=res.doc_tokens,
                truncated=res.truncated,
                text=res.text[:2000],
            )
            rows.append(row)
        return rows


class RLMPolicy:
    """A model in the REPL scaffold, its `llm()` calls answered by itself; all within its context window."""

    def __init__(
        self,
        model: str,
        context_tokens: int | None = None,
        sampling: Sampling | None = None,
        max_turns: int = 6,
        sub_max_new_tokens: int = 128,
        dtype: str = "float32",
        device: str | None = None,
        label: str | None = None,
        generation_mode: str = "auto",
    ) -> None:
        self.model_name, self.max_turns = model, max_turns
        self.model, self.tokenizer = load_policy_model(model, dtype, device)
        self.chat = ChatFormat(self.tokenizer)
        self.backend = HFBackend(self.model, self.tokenizer, mode=generation_mode)
        self.context_tokens = context_tokens or context_window(model, self.model)
        self.sampling = sampling or Sampling(max_new_tokens=256, temperature=0.0)
        self.sub_sampling = Sampling(max_new_tokens=sub_max_new_tokens, temperature=0.0)
        self.env_config = EnvConfig(max_iterations=max_turns)
        self.label = label or f"rlm:{short_name(model)}"

    def describe(self) -> dict[str, Any]:
        return {
            "policy": "rlm",
            "label": self.label,
            "model": self.model_name,
            "context_tokens": self.context_tokens,
            "max_new_tokens": self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "max_turns": self.max_turns,
        }

    def _prompt_tokens(self, tasks: Sequence[Task]) -> int:
        system = system_prompt(self.env_config.chunk_chars)
        return max(
            len(
                self.chat.prompt_ids(
                    system, first_user_message(t.question, t.length_chars, t.length_tokens, True)
                )
            )
            for t in tasks
        )

    def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        room = self.context_tokens - self._prompt_tokens(tasks)
        if room < 64:
            raise ValueError(
                f"the scaffold's first prompt leaves {room} tokens of a {self.context_tokens} context"
            )
        sub_input = self.context_tokens - self.sub_sampling.max_new_tokens
        config = RolloutConfig(
            max_turns=self.max_turns,
            max_total_tokens=room,
            sampling=self.sampling,
            sub_sampling=self.sub_sampling,
            sub_max_input_tokens=sub_input,
        )
        sub = EngineSubLM(self.backend, self.chat, self.sub_sampling, sub_input)
        return _EngineRunner(self.backend, self.chat, config, self.env_config, sub, engine_sub_lm=sub).run(
            tasks
        )
