"""The environment as `fathom serve` exposes it: `RLMEnvironment` plus the server's input policy.

Every reset that reaches the server — session-keyed HTTP or OpenEnv's /ws — goes through
`ServedEnvironment.reset_async`, which

- checks the arguments' types and names (`protocol.WireReset`): /ws hands them over as the client sent
  them, so a string where a task or a seed belongs is a clear error, not a crash mid-reset;
- rejects a task that names a file (``document_path``): a client may only send its document inline;
- caps the document length a client may ask a generator for (`max_length_tokens`);
- resolves the task (parsing an inline document, or generating one) in a worker thread, so a large
  document never stalls the event loop that serves the other sessions; a loaded task's id is a dict
  lookup and stays on the loop;
- reports a bad request as `InvalidTask` (or the environment's `TaskNotFound`), so the HTTP routes can
  answer 422/404 while anything else stays a server error.

Episodes run as in-process with one difference: a step's tokens are counted from its text (the task
layer's estimate), never taken from the client's ``num_tokens``, so a client cannot buy a better token
score by under-reporting.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import ValidationError

from fathom.env import RLMEnvironment, RLMObservation, TaskNotFound
from fathom.server.protocol import WireReset, describe_errors
from fathom.tasks import Task


class InvalidTask(ValueError):
    """A reset request whose task cannot be used: malformed, unknown family, or over a limit."""


class ServedEnvironment(RLMEnvironment):
    TRUSTS_TOKEN_COUNTS = False

    def __init__(self, *args: Any, max_length_tokens: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_length_tokens = max_length_tokens

    async def resolve_served(
        self,
        task: Task | dict[str, Any] | None = None,
        task_id: str | None = None,
        family: str | None = None,
        seed: int | None = None,
        length_tokens: int | None = None,
    ) -> Task:
        if length_tokens is not None and length_tokens > self.max_length_tokens:
            raise InvalidTask(
                f"length_tokens {length_tokens:,} is over the server's limit of {self.max_length_tokens:,}"
            )
        if isinstance(task, dict) and task.get("document_path") is not None:
            # A path would name a file on the server's disk.
            raise InvalidTask("a task sent to the server must carry 'document' inline, not 'document_path'")
        try:
            if task_id is not None and task is None and family is None:  # a dict lookup: no thread hop
                return self.resolve_task(task, task_id, family, seed, length_tokens)
            return await asyncio.to_thread(self.resolve_task, task, task_id, family, seed, length_tokens)
        except TaskNotFound:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            reason = (
                exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            )  # KeyError str() adds quotes
            raise InvalidTask(f"invalid task: {reason}") from exc

    async def reset_async(
        self,
        task: Task | dict[str, Any] | None = None,
        task_id: str | None = None,
        family: str | None = None,
        seed: int | None = None,
        length_tokens: int | None = None,
        episode_id: str | None = None,
        **unknown: Any,
    ) -> RLMObservation:
        given = {"task": task, "task_id": task_id, "family": family, "seed": seed}
        given |= {"length_tokens": length_tokens, "episode_id": episode_id, **unknown}
        try:
            args = WireReset.model_validate({k: v for k, v in given.items() if v is not None})
        except ValidationError as exc:
            raise InvalidTask(f"invalid reset: {describe_errors(exc.errors())}") from exc
        resolved = await self.resolve_served(
            args.task, args.task_id, args.family, args.seed, args.length_tokens
        )
        return await super().reset_async(task=resolved, episode_id=args.episode_id)
