"""A teacher model behind an OpenAI-compatible chat endpoint, as a policy backend for SFT transcripts.

The rollout engine speaks token ids; a chat endpoint speaks messages. `MessageSplitter` recovers the
messages from the decoded conversation using the delimiters the student's own chat template puts between
roles (found once by rendering a probe conversation with marker contents), so the teacher sees exactly
the system prompt, question and REPL outputs the student will see. The teacher's reply is tokenized with
the *student's* tokenizer and closed with its end-of-turn token; the engine appends those ids verbatim, so
the SFT transcript is token-exact for the student, environment turns included.

Only chat-format students are supported (a base model's few-shot format has no roles to split). Requests
run concurrently on a thread pool; the endpoint does the batching. This module does not grade anything.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fathom.rollout.backends import Generation, Sampling
from fathom.rollout.chat import ChatFormat

_MARKS = ("\u27e6SYS\u27e7", "\u27e6USER1\u27e7", "\u27e6ASSISTANT1\u27e7", "\u27e6USER2\u27e7")


class MessageSplitter:
    def __init__(self, tokenizer: Any) -> None:
        probe = [
            {"role": "system", "content": _MARKS[0]},
            {"role": "user", "content": _MARKS[1]},
            {"role": "assistant", "content": _MARKS[2]},
            {"role": "user", "content": _MARKS[3]},
        ]
        text = tokenizer.apply_chat_template(probe, add_generation_prompt=True, tokenize=False)
        at = [text.index(m) for m in _MARKS]
        ends = [i + len(m) for i, m in zip(at, _MARKS, strict=True)]
        self.head = text[: at[0]]
        self.system_to_user = text[ends[0] : at[1]]
        self.user_to_assistant = text[ends[1] : at[2]]
        self.assistant_to_user = text[ends[2] : at[3]]
        if text[ends[3] :] != self.user_to_assistant:
            raise ValueError("chat template: the generation prompt differs from the assistant header")

    def split(self, text: str) -> list[dict[str, str]]:
        """Messages of a decoded conversation that ends with the assistant's generation prompt."""
        if not text.startswith(self.head) or not text.endswith(self.user_to_assistant):
            raise ValueError("conversation does not match the student's chat template")
        body = text[len(self.head) : len(text) - len(self.user_to_assistant)]
        system, sep, rest = body.partition(self.system_to_user)
        if not sep:
            raise ValueError("conversation has no system/user boundary")
        messages = [{"role": "system", "content": system}]
        turns = rest.split(self.user_to_assistant)
        for i, turn in enumerate(turns):
            if i == 0:
                messages.append({"role": "user", "content": turn})
                continue
            assistant, sep, user = turn.partition(self.assistant_to_user)
            if not sep:
                raise ValueError("conversation has an assistant turn with no user reply after it")
            messages += [{"role": "assistant", "content": assistant}, {"role": "user", "content": user}]
        return messages


class TeacherBackend:
    """``generate(prompt ids, sampling)`` answered by a chat endpoint; replies as student token ids."""

    def __init__(
        self,
        chat: ChatFormat,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        concurrency: int = 8,
        timeout_s: float = 300.0,
    ) -> None:
        from openai import OpenAI

        if not chat.chat:
            raise ValueError("a teacher endpoint needs a chat-format student (model.chat = true)")
        self.chat, self.model, self.temperature, self.concurrency = chat, model, temperature, concurrency
        self.splitter = MessageSplitter(chat.tokenizer)
        self.client = OpenAI(
            base_url=base_url, api_key=os.environ.get(api_key_env, "EMPTY"), timeout=timeout_s
        )
        self.calls = 0

    def _reply(self, messages: list[dict[str, str]], max_tokens: int) -> str:
        response = self.client.chat.completions.create(
            model=self.model, messages=messages, temperature=self.temperature, max_tokens=max_tokens
        )
        return response.choices[0].message.content or ""

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        tok = self.chat.tokenizer
        conversations = [self.splitter.split(tok.decode(ids)) for ids in prompts]
        self.calls += 1
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            replies = list(pool.map(lambda m: self._reply(m, sampling.max_new_tokens), conversations))
        out = []
        for reply in replies:
            ids = [*tok.encode(reply, add_special_tokens=False), self.chat.eos_id]
            cut = ids[: sampling.max_new_tokens]
            out.append(Generation(cut, len(cut) == len(ids), None))
        return out
