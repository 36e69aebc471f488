"""Live demo episodes: build the task a demo request asks for, pick its policy, and run it through the
rollout engine, yielding each piece of the episode as it happens.

A request names a generated task (family, length, seed, difficulty) or pastes a document and a question.
For a pasted one, the first task family whose reference solver answers the question from the document
lends its name (so the expert's script for it applies) and, when no gold answer is given, its gold;
otherwise the question is free-form and needs a gold answer. A given gold is read before any solver
runs, and solvers only read documents up to `SOLVER_MAX_CHARS` (a longer one needs its gold).

Policies:

- ``expert``: the scripted expert (`fathom.env.expert.expert_turn`), its `llm()` calls read by
  `expert_reader`. On a free-form question it greps the question's words, then asks `llm()` about every
  chunk, read by the keyword reader (`fathom.server.cli.keyword_reader`): a scaffold demo, not a solver.
- ``model``: the model the server was started with (`--demo-model`), on CPU through `HFBackend`; its own
  `llm()` calls go to the same model (`EngineSubLM`), as in training.

Both run in `RolloutEngine`, so a live episode is exactly what training and eval run, and its pieces are
those of a trace line (`fathom.server.traces`): ``task``, ``start`` (system prompt, first user message),
one ``turn`` per model turn (``Rollout.trace["turns"]`` items), then ``end`` (reward, breakdown, end
reason, answer). This module does not serve HTTP (demo.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fathom.env import EnvConfig, RLMEnvironment, ScriptedSubLM, SubLM
from fathom.env.expert import CHUNK_CHARS, EXPERTS, expert_reader, expert_turn
from fathom.rollout import ChatFormat, EngineSubLM, HFBackend, RolloutConfig, RolloutEngine, Sampling
from fathom.rollout.policies import ScriptedBackend
from fathom.server.cli import keyword_reader
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


def free_form_turn(task: Task, turn: int) -> str:
    """The expert on a question no family knows: grep the question's words, then let llm() read chunks."""
    if turn == 0:
        code = f"""
import re
question = {task.question!r}
words = {{w.lower() for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9_-]{{3,}}", question)}}
lines = [line for line in ctx.splitlines() if words & set(re.findall(r"[a-z0-9_-]+", line.lower()))]
print(len(ctx), "chars;", len(lines), "lines share a word with the question")
print(lines[:5])
"""
        return f"No task format fits this question: I look for lines that share its words.\n```repl{code}```"
    code = f"""
chunks = [ctx[i:i + {CHUNK_CHARS}] for i in range(0, len(ctx), {CHUNK_CHARS})]
replies = llm_batch([(question, chunk) for chunk in chunks])
found = [r for r in replies if r.strip() and r != "(nothing relevant found)"]
print(len(chunks), "chunks read;", len(found), "with an answer")
FINAL(found[0] if found else "not found")
"""
    return f"Let llm() read the document chunk by chunk and take the first answer.\n```repl{code}```"


def expert_policy(chat: ChatFormat, task: Task) -> tuple[ScriptedBackend, SubLM]:
    """The expert as a backend for one episode, and the reader for its llm() calls."""
    script = expert_turn if task.family in EXPERTS else free_form_turn
    # One episode per engine run: each generate call is the next turn, so a counter numbers them.
    turns = itertools.count()
    backend = ScriptedBackend(chat, lambda _conversation: script(task, next(turns)))
    reader = expert_reader() if task.family in EXPERTS else ScriptedSubLM(keyword_reader)
    return backend, reader


class _LiveEngine(RolloutEngine):
    """The rollout engine, publishing each episode's start and each turn as soon as it is done."""

    def __init__(self, *args: Any, publish: Callable[[Event], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.publish = publish
        self._started: set[int] = set()

    async def _turn(
        self,
        envs: list[RLMEnvironment],
        rollouts: list[Any],
        active: list[int],
        sampling: Sampling,
        last: bool,
    ) -> list[int]:
        seen = {}
        for i in active:
            trace = rollouts[i].trace
            if i not in self._started:  # the episode has been reset: its prompt is known
                self._started.add(i)
                self.publish(("start", {"system": trace["system"], "first": trace["first"]}))
            seen[i] = len(trace["turns"])
        still = await super()._turn(envs, rollouts, active, sampling, last)
        for i in active:
            for turn in rollouts[i].trace["turns"][seen[i] :]:
                self.publish(("turn", turn))
        return still


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
    env_config = replace(env_config, max_iterations=request.max_turns)
    if request.policy == "expert":
        backend, sub_lm = expert_policy(await chat_for_expert(), task)
        chat, engine_sub = backend.chat, None
        config = RolloutConfig(max_turns=request.max_turns, max_total_tokens=EXPERT_TOTAL_TOKENS)
    else:
        if model is None:
            raise InvalidTask("no model policy: start the server with --demo-model NAME")
        chat = model.chat
        engine_sub = EngineSubLM(model.backend, chat, Sampling(max_new_tokens=128, temperature=0.0), 2048)
        backend, sub_lm = model.backend, engine_sub
        sampling = Sampling(max_new_tokens=request.max_new_tokens, temperature=request.temperature)
        config = RolloutConfig(request.max_turns, MODEL_TOTAL_TOKENS, sampling)
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    engine = _LiveEngine(
        backend,
        chat,
        lambda: make_env(env_config, sub_lm),
        config,
        sub_lm=engine_sub,
        publish=queue.put_nowait,
    )
    run = asyncio.ensure_future(engine.run([task]))
    run.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        while (event := await queue.get()) is not None:
            yield event
        rollout = run.result()[0]
    finally:
        if not run.done():  # the page went away: stop the episode (the engine closes its sandbox)
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
    answers = [t["answer"] for t in rollout.trace.get("turns", []) if t.get("answer") is not None]
    yield (
        "end",
        {
            "reward": rollout.reward,
            "breakdown": rollout.breakdown,
            "end_reason": rollout.end_reason,
            "answer": answers[-1] if answers else None,
            "turns": rollout.turns,
        },
    )
