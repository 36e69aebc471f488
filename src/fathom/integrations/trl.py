"""FATHOM episodes inside TRL's `GRPOTrainer(environment_factory=...)` (TRL 1.16).

TRL runs its own tool-calling loop. It builds environments with the factory (one per rollout, pooled and
reused across batches), calls ``reset(**row)`` with every column of the dataset row and appends the string
it returns to the row's last user message, exposes every public method of the class as a tool (schema from
the type hints and the Google-style docstring), parses the model's tool calls with the tokenizer's response
parser, and calls ``get_reward()`` once per finished rollout as a reward of weight 1 logged under the class
name.

`FathomEnv` maps that loop onto one RLM episode per rollout:

- ``reset(task=... | task_id=..., **row)`` starts the episode and returns its first user message;
- its one tool, ``python(code)``, runs ``code`` as one REPL turn (``ctx``, ``llm()``, ``llm_batch()``,
  ``FINAL()``) and returns the observation text the model reads next;
- ``get_reward()`` returns the composed reward; `reward_breakdown` holds its components and
  `observations` the episode's typed observations (the trace).

Two backends, same class: `in_process_factory` (an `RLMEnvironment` per rollout; the sub-LM is given
here) and `remote_factory` (a `FathomClient` session on a running `fathom serve`, with its bearer token;
the sub-LM is the server's). `trl_dataset` turns a task file into the rows `reset` expects.

Not here: generation, chat templates, loss masking (all TRL's), and FATHOM's own rollout engine; the
README section "Use FATHOM from your trainer" lists what an episode keeps and loses in TRL's loop.
"""

from __future__ import annotations

import json
import logging
import weakref
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import httpx

from fathom.env import EnvConfig, RLMAction, RLMEnvironment, RLMObservation, RLMState, SubLM
from fathom.env.prompts import system_prompt
from fathom.reward.compose import compose
from fathom.reward.config import RewardConfig
from fathom.reward.outcome import EpisodeOutcome
from fathom.server.client import DEFAULT_TIMEOUT_S, FathomClient
from fathom.tasks import Task, load_tasks
from fathom.tasks.schema import task_from_dict

log = logging.getLogger("fathom.integrations.trl")

TOOL_NOTE = (
    "\n\nHere you run code by calling the `python` tool with one cell's source as `code`, instead of "
    "writing ```repl blocks: code written in your reply is not run. The tool returns what the cell printed. "
    "Call FINAL(value) inside a cell to answer."
)
# The end reason of an episode the model left without answering and without reaching a cap.
STOPPED = "stopped"


def tool_system_prompt(chunk_chars: int = EnvConfig().chunk_chars) -> str:
    """FATHOM's system prompt with the note that code goes through the `python` tool."""
    return system_prompt(chunk_chars) + TOOL_NOTE


def outcome_of(state: RLMState) -> EpisodeOutcome:
    """The graded outcome of an episode from its state, exactly as `RLMEnvironment.outcome` builds it."""
    return EpisodeOutcome(
        answer=state.answer if state.answer_ready else None,
        answered=state.answer_ready,
        tokens=state.tokens,
        llm_calls=state.llm_calls,
        turns=state.iteration,
        llm_chars=state.llm_chars,
    )


def _inline(task: Task) -> Task:
    """The task with its document in the record (a server refuses paths; a dataset row must stand alone)."""
    if task.document is not None:
        return task
    return replace(task, document=task.read_document(), document_path=None, base_dir=None)


class Episodes(Protocol):
    """What `FathomEnv` needs from a backend: one episode at a time."""

    reward_config: RewardConfig

    def reset(self, task: Task | None, task_id: str | None) -> tuple[RLMObservation, Task]: ...
    def step(self, text: str) -> RLMObservation: ...
    def state(self) -> RLMState: ...
    def close(self) -> None: ...


class LocalEpisodes:
    """Episodes in this process: one `RLMEnvironment` (and its sandbox worker) per `FathomEnv`."""

    def __init__(
        self,
        config: EnvConfig,
        sub_lm: SubLM | None,
        tasks: list[Task],
    ) -> None:
        self.env = RLMEnvironment(config, sub_lm, tasks=tasks)
        self.reward_config = config.reward

    def reset(self, task: Task | None, task_id: str | None) -> tuple[RLMObservation, Task]:
        observation = self.env.reset(task=task, task_id=task_id)
        return observation, self.env.task

    def step(self, text: str) -> RLMObservation:
        return self.env.step(RLMAction(text=text))

    def state(self) -> RLMState:
        return self.env.state

    def close(self) -> None:
        self.env.close()


class RemoteEpisodes:
    """Episodes on a running `fathom serve`, one HTTP session per `FathomEnv`.

    The server grades episodes that end on its side (FINAL, turn cap, token budget) with its own reward
    config. An episode the model leaves without answering is graded here from the server's state, which
    needs the task: inline rows carry it; rows by id need the server's task file here too (`tasks`).
    """

    def __init__(
        self,
        base_url: str,
        token: str | None,
        tasks: dict[str, Task],
        reward_config: RewardConfig,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.base_url, self.client = base_url, FathomClient(base_url, token, timeout_s)
        self.tasks, self.reward_config = tasks, reward_config

    def reset(self, task: Task | None, task_id: str | None) -> tuple[RLMObservation, Task]:
        if task is not None:
            task = _inline(task)
            return self.client.reset(task=task), task
        assert task_id is not None
        if task_id not in self.tasks:
            raise KeyError(
                f"task_id {task_id!r} is not in the task file given to remote_factory(tasks=...): a remote "
                "episode by id needs the server's task file here to grade an episode left without an answer"
            )
        local = self.tasks[task_id]
        observation = self.client.reset(task_id=task_id)
        if observation.question != local.question:
            raise ValueError(
                f"task {task_id!r} differs between the server and the local task file (questions differ): "
                "start `fathom serve --tasks` with the same file"
            )
        return observation, local

    def step(self, text: str) -> RLMObservation:
        return self.client.step(text)

    def state(self) -> RLMState:
        return self.client.state

    def close(self) -> None:
        """End the server session. TRL never closes environments, so this often runs from the garbage
        collector or at exit, when the server may be gone: that is reported, not raised (nothing is left to
        end on a server that is down; one that is only unreachable reaps the session when it idles out)."""
        try:
            self.client.close()
        except httpx.TransportError as e:
            log.warning("could not end the session on %s: %s: %s", self.base_url, type(e).__name__, e)


class FathomEnv:
    """One RLM episode per TRL rollout. Public methods other than `reset` and `get_reward` are TRL tools,
    so this class has exactly one (`python`); everything else is a property or private."""

    def __init__(self, episodes: Episodes) -> None:
        self._episodes = episodes
        self._task: Task | None = None
        self._observations: list[RLMObservation] = []
        self._breakdown: dict[str, Any] | None = None
        self._end_reason: str | None = None
        # Closes the sandbox or the server session when this object goes (or at exit): TRL never closes it.
        self._finalizer = weakref.finalize(self, episodes.close)

    # ---- TRL's contract --------------------------------------------------------------------------
    def reset(self, task: dict[str, Any] | str | None = None, task_id: str | None = None, **row: Any) -> str:
        """Start an episode for a dataset row: `task` (a task-file record, as a dict or its JSON text) or
        `task_id` (an id in the task file the factory was given). Other columns (`prompt`, ...) are ignored.
        Returns the first user message (question and document size; never the document)."""
        if (task is None) == (task_id is None):
            raise ValueError("a FATHOM row needs exactly one of 'task' and 'task_id'")
        record = None
        if task is not None:
            record = task_from_dict(json.loads(task) if isinstance(task, str) else task)
        observation, self._task = self._episodes.reset(record, task_id)
        self._observations, self._breakdown, self._end_reason = [observation], None, None
        return observation.text

    def python(self, code: str) -> str:
        """Run Python code as one turn in the episode's persistent REPL and return what it printed.

        The document is the string `ctx`; `llm(prompt, chunk)` and `llm_batch(pairs)` ask a helper model
        about a piece of text; `FINAL(value)` submits the answer and ends the episode. Variables persist.

        Args:
            code: The Python source of one cell.

        Returns:
            The cell's output and errors, then the number of turns left.
        """
        if self._task is None:
            raise RuntimeError("python() before reset(): TRL resets every environment first")
        if self._end_reason is not None:
            return f"The episode is over ({self._end_reason}); nothing ran."
        if not code.strip():
            return "The code was empty; nothing ran."
        if any(line.strip() == "```" for line in code.split("\n")):
            # A bare fence would end the cell early in the environment's parser.
            return "A line holding only ``` cannot be part of a cell; nothing ran."
        observation = self._episodes.step(f"```repl\n{code}\n```")
        self._observations.append(observation)
        if not observation.done:
            return observation.text
        self._end_reason = observation.end_reason
        self._breakdown = observation.reward_breakdown
        return f"{observation.text}\n[the episode is over: {observation.end_reason}]"

    def get_reward(self) -> float:
        """The episode's composed reward. An episode still open (the model stopped calling the tool) is
        graded as it stands: no answer submitted, so it earns what an unanswered episode earns."""
        if self._task is None:
            raise RuntimeError("get_reward() before reset()")
        if self._breakdown is None:
            outcome = outcome_of(self._episodes.state())
            self._breakdown = compose(self._task, outcome, self._episodes.reward_config).to_dict()
            self._end_reason = self._end_reason or STOPPED
        return float(self._breakdown["total"])

    # ---- for reward functions, callbacks and tests -----------------------------------------------
    @property
    def task(self) -> Task | None:
        return self._task

    @property
    def observations(self) -> list[RLMObservation]:
        """The reset observation, then one per tool call that ran: cells, sub-calls, end reason, reward."""
        return list(self._observations)

    @property
    def reward_breakdown(self) -> dict[str, Any] | None:
        """{"total", "score", "correct", "capped", "components": {...}} once the episode is graded."""
        return self._breakdown

    @property
    def end_reason(self) -> str | None:
        """answered | max_iterations | token_budget (the environment's), 'stopped' (graded open), or None."""
        return self._end_reason

    @property
    def state(self) -> RLMState:
        return self._episodes.state()

    def __enter__(self) -> FathomEnv:
        return self

    def __exit__(self, *_: object) -> None:
        self._finalizer()


def _task_list(tasks: str | Path | Iterable[Task] | None) -> list[Task]:
    if isinstance(tasks, str | Path):
        return load_tasks(tasks)
    return list(tasks or ())


def in_process_factory(
    tasks: str | Path | Iterable[Task] | None = None,
    config: EnvConfig | None = None,
    sub_lm: SubLM | None = None,
) -> Callable[[], FathomEnv]:
    """An `environment_factory` whose episodes run here. `tasks` (a task file or tasks) serves rows by
    `task_id`; `sub_lm` answers `llm()` (None: no sub-calls; this environment runs no child episodes, so
    ``config.max_depth`` above 1 means the same as 1)."""
    task_list, config = _task_list(tasks), config or EnvConfig()

    def make() -> FathomEnv:
        return FathomEnv(LocalEpisodes(config, sub_lm, task_list))

    return make


def remote_factory(
    base_url: str,
    token: str | None = None,
    tasks: str | Path | Iterable[Task] | None = None,
    reward: RewardConfig | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Callable[[], FathomEnv]:
    """An `environment_factory` whose episodes run on `fathom serve` at `base_url`. `tasks` is the file
    the server was started with (`--tasks`), for rows by id; `reward` must match the server's config
    (the default does) and grades only episodes left without an answer."""
    by_id = {t.id: t for t in _task_list(tasks)}
    reward_config = reward or RewardConfig()

    def make() -> FathomEnv:
        return FathomEnv(RemoteEpisodes(base_url, token, by_id, reward_config, timeout_s))

    return make


def trl_dataset(
    tasks: str | Path | Iterable[Task],
    inline: bool = False,
    chunk_chars: int = EnvConfig().chunk_chars,
    system: str | None = None,
) -> Any:
    """A `datasets.Dataset` for `GRPOTrainer`: per task, a conversational ``prompt`` (a system turn, by
    default FATHOM's system prompt with the tool note, and an empty user turn that `reset` fills) and
    ``task_id``, or with ``inline=True`` the whole task record as JSON in ``task`` (its document read in)."""
    from datasets import Dataset  # a training dependency: not needed to drive `FathomEnv` by hand

    prompt = [
        {"role": "system", "content": tool_system_prompt(chunk_chars) if system is None else system},
        {"role": "user", "content": ""},
    ]
    rows = []
    for task in _task_list(tasks):
        if inline:
            rows.append({"prompt": prompt, "task": json.dumps(_inline(task).to_dict(), ensure_ascii=False)})
        else:
            rows.append({"prompt": prompt, "task_id": task.id})
    if not rows:
        raise ValueError("no tasks: a TRL dataset needs at least one row")
    return Dataset.from_list(rows)
