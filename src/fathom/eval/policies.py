"""The policies `fathom eval` runs, each turning a batch of tasks into one eval row per task.

- `ExpertPolicy`: the scripted expert through the rollout engine (`expert_backend`), its `llm()` calls read
  by `expert_reader`; the upper bound, and a check of the scaffold itself.
- `TeacherPolicy`: the teacher (`fathom.policies.teacher`: it knows only the conversation) through the same
  engine, its `llm()` calls read by `teacher_reader`; each row also says whether its code was grounded.
- `DirectPolicy`: a model answering from its context window alone (`fathom.rollout.direct`).
- `RLMPolicy`: a model in the REPL scaffold (the rollout engine), answering its own `llm()` calls, or with
  ``reader_model`` a second model answering them (the untrained model beside a fine-tuned one: what the
  policy's moves are worth with a reader its training did not narrow). Its whole conversation — first
  prompt, turns and REPL replies — must fit the same context window, and so must each sub-call, so it never
  reads more at once than the direct baseline does.

Models generate through vLLM on a GPU where it is installed (``generation_mode`` "auto" or "vllm"), else
through HF generate; every engine is built by `fathom.rollout.wiring.build_engine`.

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

import importlib.util
import json
import math
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fathom.env import EnvConfig, SubLM
from fathom.env.prompts import first_user_message, system_prompt
from fathom.models import ModelSpec, load_model, load_tokenizer
from fathom.models.loading import resolve_model_dir
from fathom.policies.excerpts import CHUNK_CHARS, READER_TOKENS
from fathom.policies.expert import EXPERTS
from fathom.policies.grounding import check_trace
from fathom.policies.readers import ReaderView, expert_reader, teacher_reader
from fathom.policies.scripted import expert_backend
from fathom.policies.teacher import teacher_backend
from fathom.rollout import ChatFormat, Episode, HFBackend, RolloutConfig, Sampling, VLLMBackend
from fathom.rollout.direct import run_direct
from fathom.rollout.service import GenerationService, RoutedService
from fathom.rollout.vllm_options import VLLMEngineOptions, engine_kwargs
from fathom.rollout.wiring import build_engine, hf_service, running, vllm_service
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
    """`CONTEXT_WINDOWS` for offline names and checkpoints trained from them, else the model's positions
    (read from its config.json when `model` is not loaded yet)."""
    for candidate in (name, trained_from(name)):
        if candidate in CONTEXT_WINDOWS:
            return CONTEXT_WINDOWS[candidate]
    if model is None:
        config = Path(resolve_model_dir(name)) / "config.json"
        return int(json.loads(config.read_text())["max_position_embeddings"]) if config.is_file() else 8192
    return int(model.config.max_position_embeddings)


def short_name(model: str) -> str:
    return Path(model).name if ("/" in model and Path(model).expanduser().exists()) else model


def wants_vllm(generation_mode: str, device: str | None) -> bool:
    """vLLM when asked for, or for "auto" on a GPU where it is installed; HF generate otherwise."""
    import torch

    on_gpu = device != "cpu" and (device is not None or torch.cuda.is_available())
    installed = importlib.util.find_spec("vllm") is not None
    if generation_mode == "vllm":
        if not (installed and on_gpu):
            raise ValueError("generation_mode 'vllm' needs vLLM installed and a GPU")
        return True
    return generation_mode == "auto" and installed and on_gpu


@dataclass
class ModelEngine:
    """A loaded policy model and how it generates: `backend` for whole batches, `service` for the engine."""

    model: Any  # the HF model; None where vLLM holds the weights
    tokenizer: Any
    backend: Any
    service: GenerationService


def load_model_engine(
    name: str,
    dtype: str,
    device: str | None,
    generation_mode: str,
    context_tokens: int,
    vllm_memory: float = 0.3,
    vllm_kv_cache_gib: float = 0.0,
) -> ModelEngine:
    """`vllm_memory`: the vLLM engine's share of the GPU (weights and KV cache), so that several
    evaluations (or an evaluation beside a training run) can share one GPU; `vllm_kv_cache_gib` > 0: a KV
    cache of that size without vLLM's start-up memory profile (which aborts when another process on the
    GPU frees memory while it runs). With vLLM, only the tokenizer is loaded here: vLLM loads the weights
    itself, and an HF copy beside it would hold a second model's GPU memory (`model` is then None)."""
    if wants_vllm(generation_mode, device):
        path = Path(name).expanduser()
        if (path / "adapter_config.json").exists() and not (path / "config.json").exists():
            raise ValueError(
                f"{name} is a LoRA adapter: evaluate its merged model (RUN/final/merged) with vLLM"
            )
        tokenizer = load_tokenizer(ModelSpec(name=name))
        backend: Any = VLLMBackend(
            str(resolve_model_dir(name)),
            max_model_len=context_tokens,
            dtype="bfloat16",
            gpu_memory_utilization=vllm_memory,
            **engine_kwargs(VLLMEngineOptions(kv_cache_gib=vllm_kv_cache_gib)),
        )
        return ModelEngine(None, tokenizer, backend, vllm_service(backend.llm))
    model, tokenizer = load_policy_model(name, dtype, device)
    mode = "plain" if generation_mode in ("auto", "vllm") else generation_mode
    backend = HFBackend(model, tokenizer, mode=mode)
    return ModelEngine(model, tokenizer, backend, hf_service(backend, model))


def check_reader_vocabulary(
    reader: ModelEngine, name: str, policy_tokenizer: Any, policy_name: str
) -> ModelEngine:
    """`reader` (a second model that answers a policy's `llm()` calls), once it is known to share the policy's
    vocabulary: the engine writes each call's prompt in the policy's tokens and reads the reply back with them."""
    if reader.tokenizer.get_vocab() != policy_tokenizer.get_vocab():
        raise ValueError(
            f"the reader model {name} has another tokenizer than the policy {policy_name}: "
            "a reader must share the policy's vocabulary"
        )
    return reader


def episode_row(task: Task, episode: Episode, wall_s: float) -> dict[str, Any]:
    """An eval row for one episode in the scaffold (see the module docstring for the fields)."""
    row = base_row(task, None if episode.reward is None else episode.reward.to_dict(), episode.answer)
    logged = [s for t in episode.turns for s in t.subcalls]
    if episode.subcalls:  # the engine's own model read: exact token counts
        sub_tokens = sum(len(s.prompt_ids) + len(s.ids) for s in episode.subcalls)
    else:  # an outside reader: estimated from the characters it read and wrote
        sub_tokens = sum(
            math.ceil((len(s.prompt) + s.chunk_chars) / CHARS_PER_TOKEN)
            + math.ceil(len(s.reply) / CHARS_PER_TOKEN)
            for s in logged
        )
    tokens = episode.model_tokens
    row.update(
        turns=len(episode.turns),
        tokens=tokens,
        llm_calls=len(logged),
        cost_tokens=episode.read_tokens() + tokens + sub_tokens,
        context_used=len(episode.prompt_ids) + episode.length,
        end_reason=episode.end_reason,
        wall_s=round(wall_s, 4),
        trace=episode.to_json(),  # the runner moves it to traces.jsonl
    )
    return row


def run_in_scaffold(
    service: GenerationService,
    chat: ChatFormat,
    config: RolloutConfig,
    reader: SubLM | str | None,
    tasks: Sequence[Task],
) -> list[dict[str, Any]]:
    """Every task's episode through one engine; one row each (wall time shared: episodes run together)."""
    engine = build_engine(service, chat, config, reader)
    started = time.perf_counter()
    with running(service):
        episodes = engine.run_sync(list(tasks))
    wall = (time.perf_counter() - started) / max(1, len(tasks))
    return [episode_row(t, e, wall) for t, e in zip(tasks, episodes, strict=True)]


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
        service = hf_service(expert_backend(self.chat, tasks))
        return run_in_scaffold(service, self.chat, config, expert_reader(), tasks)


class TeacherPolicy:
    """The teacher in the scaffold: any task (it needs no family); `tokenizer_name` only makes ids.

    Its `llm()` calls are read by `teacher_reader` (the task layer's solver, shown what a student's reader
    would be), or with ``reader_model`` by that model, asked greedily as the engine asks a student's reader:
    what the teacher's own moves are worth with a reader no better than the student's."""

    def __init__(
        self,
        tokenizer_name: str = "tiny-smol",
        max_turns: int = 12,
        seed: int = 0,
        sub_max_input_tokens: int = READER_TOKENS,
        reader_model: str | None = None,
        sub_max_new_tokens: int = 128,
        dtype: str = "float32",
        device: str | None = None,
        generation_mode: str = "auto",
        vllm_memory: float = 0.3,
        vllm_kv_cache_gib: float = 0.0,
        step_timeout_s: float = 60.0,
        chunk_size: int = CHUNK_CHARS,
        label: str | None = None,
        repetition_penalty: float = 1.0,
    ) -> None:
        self.label = "teacher" if reader_model is None else f"teacher:{short_name(reader_model)} reads"
        if chunk_size != CHUNK_CHARS:
            self.label += f", {chunk_size:,}-character chunks"
        self.label = label or self.label
        self.chunk_size = chunk_size  # what its reading cells hand llm() at a time
        self.step_timeout_s = step_timeout_s  # a reader on a CPU may need more than a GPU's 60 s a turn
        self.tokenizer_name, self.reader_model = tokenizer_name, reader_model
        self.max_turns, self.seed = max_turns, seed
        self.sub_max_input_tokens = sub_max_input_tokens  # its reader is shown what a student's would be
        if repetition_penalty != 1.0 and reader_model is None:
            raise ValueError(
                "a repetition penalty is for a reader model: the teacher's own reader samples nothing"
            )
        # greedy, as the engine asks a student's reader; the penalty as an rlm policy's llm() replies get it
        self.sub_sampling = Sampling(
            max_new_tokens=sub_max_new_tokens, temperature=0.0, repetition_penalty=repetition_penalty
        )
        tokenizer = load_tokenizer(ModelSpec(name=tokenizer_name))
        self.chat = ChatFormat(tokenizer)
        self.reader: ModelEngine | None = None
        if reader_model is not None:
            window = sub_max_input_tokens + sub_max_new_tokens
            self.reader = check_reader_vocabulary(
                load_model_engine(
                    reader_model, dtype, device, generation_mode, window, vllm_memory, vllm_kv_cache_gib
                ),
                reader_model, tokenizer, f"the teacher's tokenizer ({tokenizer_name})",
            )  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {
            "policy": "teacher",
            "label": self.label,
            "model": None,
            "max_turns": self.max_turns,
            "reader_model": self.reader_model,  # None: the task layer's solver reads its llm() calls
            "step_timeout_s": self.step_timeout_s,
            "chunk_chars": self.chunk_size,
            "repetition_penalty": self.sub_sampling.repetition_penalty,  # the reader model's
        }

    def run(self, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        config = RolloutConfig(
            max_turns=self.max_turns,
            max_total_tokens=1 << 20,
            sub_max_input_tokens=self.sub_max_input_tokens,
            sub_sampling=self.sub_sampling,
            step_timeout_s=self.step_timeout_s,
        )
        teacher = hf_service(teacher_backend(self.chat, self.seed, chunk_size=self.chunk_size))
        service: GenerationService = teacher
        reader: SubLM | str = ReaderView(teacher_reader(), self.chat, config.sub_max_input_tokens)
        if self.reader is not None:  # "base": RoutedService's second model answers every llm() call
            service, reader = RoutedService(teacher, self.reader.service, base_adapter=True), "base"
        rows = run_in_scaffold(service, self.chat, config, reader, tasks)
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
        vllm_memory: float = 0.3,
        vllm_kv_cache_gib: float = 0.0,
    ) -> None:
        self.model_name = model
        window = context_tokens or context_window(model, None)
        self.engine = load_model_engine(
            model, dtype, device, generation_mode, window, vllm_memory, vllm_kv_cache_gib
        )
        self.model, self.tokenizer, self.backend = (
            self.engine.model,
            self.engine.tokenizer,
            self.engine.backend,
        )
        self.chat = ChatFormat(self.tokenizer)
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
            "repetition_penalty": self.sampling.repetition_penalty,
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
        vllm_memory: float = 0.3,
        vllm_kv_cache_gib: float = 0.0,
        sub_max_input_tokens: int | None = None,
        reader_model: str | None = None,
        step_timeout_s: float = 60.0,
    ) -> None:
        self.model_name, self.max_turns, self.reader_model = model, max_turns, reader_model
        self.step_timeout_s = step_timeout_s
        # what the policy's own reader is shown of an llm() call (None: the window less the reply), as in
        # training (rollout.sub_max_input_tokens); the environment's stated chunk size follows from it
        self.sub_max_input_tokens = sub_max_input_tokens
        window = context_tokens or context_window(model, None)
        self.engine = load_model_engine(
            model, dtype, device, generation_mode, window, vllm_memory, vllm_kv_cache_gib
        )
        self.model, self.tokenizer = self.engine.model, self.engine.tokenizer
        self.service: GenerationService = self.engine.service
        if reader_model is not None:
            reader = check_reader_vocabulary(
                load_model_engine(
                    reader_model, dtype, device, generation_mode, window, vllm_memory, vllm_kv_cache_gib
                ),
                reader_model, self.tokenizer, model,
            )  # fmt: skip
            self.service = RoutedService(self.engine.service, reader.service, base_adapter=True)
        self.chat = ChatFormat(self.tokenizer)
        self.context_tokens = context_tokens or context_window(model, self.model)
        self.sampling = sampling or Sampling(max_new_tokens=256, temperature=0.0)
        # Greedy sub-calls, with the turns' repetition penalty: the reader is decoded as the policy's turns
        self.sub_sampling = Sampling(
            max_new_tokens=sub_max_new_tokens,
            temperature=0.0,
            repetition_penalty=self.sampling.repetition_penalty,
        )
        self.label = label or f"rlm:{short_name(model)}"

    def describe(self) -> dict[str, Any]:
        return {
            "policy": "rlm",
            "label": self.label,
            "model": self.model_name,
            "context_tokens": self.context_tokens,
            "max_new_tokens": self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "repetition_penalty": self.sampling.repetition_penalty,
            "max_turns": self.max_turns,
            "sub_max_input_tokens": self._sub_input(),
            "reader_model": self.reader_model,  # None: the policy answers its own llm() calls
            "step_timeout_s": self.step_timeout_s,
        }

    def _sub_input(self) -> int:
        room = self.context_tokens - self.sub_sampling.max_new_tokens
        return min(room, self.sub_max_input_tokens or room)

    def _prompt_tokens(self, tasks: Sequence[Task]) -> int:
        system = system_prompt(EnvConfig().chunk_chars)
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
        config = RolloutConfig(
            max_turns=self.max_turns,
            max_total_tokens=room,
            sampling=self.sampling,
            sub_sampling=self.sub_sampling,
            sub_max_input_tokens=self._sub_input(),
            context_tokens=self.context_tokens,
            step_timeout_s=self.step_timeout_s,
        )
        reader = "policy" if self.reader_model is None else "base"  # "base": RoutedService's second model
        return run_in_scaffold(self.service, self.chat, config, reader, tasks)
