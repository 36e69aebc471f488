"""Live demo episodes: build the task a demo request asks for, pick its policy, and run it through the
rollout engine, yielding each piece of the episode as it happens.

A request names a generated task (family, length, seed, difficulty) or pastes a document and a question.
For a pasted one, the first task family whose reference solver answers the question from the document
lends its name (so the expert's script for it applies) and, when no gold answer is given, its gold;
otherwise the question is free-form and needs a gold answer. A given gold is read before any solver
runs, and solvers only read documents up to `SOLVER_MAX_CHARS` (a longer one needs its gold).

Policies:

- ``expert``: `fathom.policies.freeform.demo_expert`: the scripted expert, its `llm()` calls read by
  `expert_reader`; on a free-form question it greps the question's words, then asks `llm()` about every
  chunk, read by the keyword reader: a scaffold demo, not a solver.
- ``model``: the model the server was started with (`--demo-model`), on CPU through `HFBackend`; its own
  `llm()` calls go to the same model, as in training.

Both run in the rollout engine (`fathom.rollout.wiring.build_engine`), so a live episode is exactly what
training and eval run, and its pieces are those of a trace line (`fathom.rollout.episode`): ``task``,
``start`` (system prompt, first user message), one ``turn`` per model turn (`turn_json`), then ``end``
(reward, breakdown, end reason, answer). This module does not serve HTTP (demo.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fathom.env import EnvConfig, RLMEnvironment, SubLM
from fathom.policies.freeform import demo_expert
from fathom.rollout import ChatFormat, HFBackend, RolloutConfig, Sampling
from fathom.rollout.episode import Episode, Turn, turn_json
from fathom.rollout.wiring import build_engine, hf_service
from fathom.server.served import InvalidTask
from fathom.tasks import FAMILIES, Task, estimate_tokens, generate_task
from fathom.tasks.schema import answer_problem

EXPERT_TOKENIZER = "tiny-smol"  # the expert's text only becomes ids for the engine, as in `fathom eval`
DOCUMENT_HEAD_CHARS = 4000  # how much of the document the page shows
MODEL_TOTAL_TOKENS = 8192  # completion-side budget of a model episode (CPU: keep it small)
EXPERT_TOTAL_TOKENS = 1 << 20  # the expert is not context-limited; the budget only stops a broken episode
# Longest pasted document the family solvers read: some are superlinear (pairs enumerates every pair of
# users, ~0.1 s at 22K characters of records and ~7 s and 400 MB at 224K), and a paste must not hold a
# thread and memory for that long. A longer document runs with the gold answer it is given.
SOLVER_MAX_CHARS = 32_768
MAX_QUESTION_CHARS = 4_000
Event = tuple[str, dict[str, Any]]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GeneratedTask(_Body):
    family: str
    length_tokens: int = Field(8192, ge=256)
    seed: int = 0
    difficulty: Literal["easy", "medium", "hard"] = "medium"


class PastedTask(_Body):
    document: str = Field(min_length=1)
    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS)
    gold: str = Field(
        "", description="JSON (a number, a list) or plain text; empty: solve it if a family can"
    )
    metric: Literal["auto", "exact", "numeric", "set_f1"] = "auto"


class RunRequest(_Body):
    policy: Literal["expert", "model"] = "expert"
    generated: GeneratedTask | None = None
    pasted: PastedTask | None = None
    max_turns: int = Field(8, ge=1, le=24)
    max_new_tokens: int = Field(256, ge=8, le=2048, description="per model turn (model policy)")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0: greedy (model policy)")

    @model_validator(mode="after")
    def _one_task(self) -> RunRequest:
        if (self.generated is None) == (self.pasted is None):
            raise ValueError("give exactly one of 'generated' and 'pasted'")
        return self


@dataclass(frozen=True)
class DemoModel:
    """The model behind the ``model`` policy: loaded once when the server starts."""

    name: str
    backend: HFBackend
    chat: ChatFormat


def load_demo_model(name: str) -> DemoModel:
    """Load `name` (an HF path or an offline name such as ``smollm2-135m``) on CPU."""
    from fathom.models import ModelSpec, load_model

    model, tokenizer = load_model(ModelSpec(name=name, device="cpu"))
    model.eval()
    return DemoModel(name, HFBackend(model, tokenizer), ChatFormat(tokenizer))


def _metric_for(answer: Any) -> str:
    if isinstance(answer, list):
        return "set_f1"
    return "numeric" if isinstance(answer, int | float) and not isinstance(answer, bool) else "exact"


def _parse_gold(text: str) -> Any:
    """A gold answer as typed: JSON when it parses to a number or a list, the text itself otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()
    return value if isinstance(value, int | float | list) and not isinstance(value, bool) else text.strip()


def solving_family(question: str, document: str) -> tuple[str, Any] | None:
    """(family, its reference answer) for the first family whose solver answers the question, or None."""
    for name, family in FAMILIES.items():
        try:
            return name, family.solve(question, document)
        except (ValueError, LookupError):  # not this family's question, or a document it cannot answer
            continue
    return None


def _checked_gold(gold: Any, metric_choice: str) -> tuple[Any, str]:
    metric = _metric_for(gold) if metric_choice == "auto" else metric_choice
    problem = answer_problem(metric, gold)
    if problem:
        raise InvalidTask(f"gold answer {gold!r}: {problem}")
    return gold, metric


def build_task(request: RunRequest, max_length_tokens: int) -> Task:
    """The task a request asks for; `InvalidTask` says what is wrong with it. CPU-bound: run in a thread."""
    if request.generated is not None:
        g = request.generated
        if g.family not in FAMILIES:
            raise InvalidTask(f"unknown family {g.family!r}; known: {', '.join(FAMILIES)}")
        if g.length_tokens > max_length_tokens:
            raise InvalidTask(f"length_tokens {g.length_tokens:,} is over the limit of {max_length_tokens:,}")
        return generate_task(g.family, g.seed, g.length_tokens, g.difficulty)
    p = request.pasted
    assert p is not None  # RunRequest checks that exactly one is given
    # The given gold is read first: a bad one is refused before any solver runs, and a good one
    # needs a solver only to name the family (whose expert script then applies).
    given = _checked_gold(_parse_gold(p.gold), p.metric) if p.gold.strip() else None
    solved = solving_family(p.question, p.document) if len(p.document) <= SOLVER_MAX_CHARS else None
    if given is not None:
        gold, metric = given
    elif solved is not None:
        gold, metric = _checked_gold(solved[1], p.metric)
    elif len(p.document) > SOLVER_MAX_CHARS:
        raise InvalidTask(
            f"give a gold answer: the task families' solvers read documents up to {SOLVER_MAX_CHARS:,} "
            f"characters, and this one has {len(p.document):,}"
        )
    else:
        raise InvalidTask(
            "give a gold answer: no task family's solver answers this question from this document"
        )
    digest = hashlib.sha1(f"{p.question}\n{p.document}".encode()).hexdigest()[:8]
    family = solved[0] if solved is not None else "pasted"
    return Task(
        id=f"pasted-{digest}" if solved is None else f"pasted-{family}-{digest}",
        family=family,
        question=p.question,
        answer=gold,
        metric=metric,
        length_tokens=estimate_tokens(p.document),
        length_chars=len(p.document),
        difficulty="custom",
        seed=0,
        document=p.document,
    )


def task_card(task: Task) -> dict[str, Any]:
    """What the page shows of a task before its episode starts."""
    document = task.read_document()
    return {
        "task_id": task.id,
        "family": task.family,
        "question": task.question,
        "gold": task.answer,
        "metric": task.metric,
        "length_tokens": task.length_tokens,
        "doc_chars": len(document),
        "difficulty": task.difficulty,
        "document_head": document[:DOCUMENT_HEAD_CHARS],
    }


async def stream_episode(
    request: RunRequest,
    task: Task,
    chat_for_expert: Callable[[], Any],
    model: DemoModel | None,
    make_env: Callable[[EnvConfig, SubLM], RLMEnvironment],
    env_config: EnvConfig,
) -> AsyncIterator[Event]:
    """Run one episode, yielding ``(event, data)`` pieces as they happen; closing the iterator stops it.

    `chat_for_expert` is awaited for the expert's `ChatFormat` (loaded once, by the caller)."""
    yield "task", task_card(task)
    if request.policy == "expert":
        backend, reader = demo_expert(await chat_for_expert(), task)
        chat, service = backend.chat, hf_service(backend)
        config = RolloutConfig(max_turns=request.max_turns, max_total_tokens=EXPERT_TOTAL_TOKENS)
    else:
        if model is None:
            raise InvalidTask("no model policy: start the server with --demo-model NAME")
        chat, service, reader = model.chat, hf_service(model.backend), "policy"
        sampling = Sampling(max_new_tokens=request.max_new_tokens, temperature=request.temperature)
        config = RolloutConfig(request.max_turns, MODEL_TOTAL_TOKENS, sampling)
    queue: asyncio.Queue[Event | None] = asyncio.Queue()

    def publish(episode: Episode, turn: Turn | None) -> None:
        if turn is None:  # the episode has been reset: its prompt is known
            queue.put_nowait(("start", {"system": episode.system, "first": episode.first}))
        else:
            queue.put_nowait(("turn", turn_json(turn)))

    engine = build_engine(
        service,
        chat,
        config,
        reader,
        reward=env_config.reward,
        sandbox=env_config.sandbox,
        make_env=lambda config, sub_lm: make_env(replace(env_config, **_budgets(config)), sub_lm),
        on_turn=publish,
    )
    run = asyncio.ensure_future(engine.run([task]))
    run.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            yield event
        episode = run.result()[0]
    finally:
        if not run.done():  # the page went away: stop the episode (the engine closes its sandbox)
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
    yield (
        "end",
        {
            "reward": episode.total_reward,
            "breakdown": None if episode.reward is None else episode.reward.to_dict(),
            "end_reason": episode.end_reason,
            "answer": episode.answer,
            "turns": len(episode.turns),
        },
    )


def _budgets(config: EnvConfig) -> dict[str, Any]:
    """The budget fields of an environment config that the engine derived from the run's RolloutConfig."""
    return {k: getattr(config, k) for k in ("max_iterations", "max_episode_tokens", "max_depth")}
