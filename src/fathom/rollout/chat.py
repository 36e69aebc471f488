"""Token-level conversation format for multi-turn rollouts (token-in / token-out).

The prompt is rendered once. After that the conversation only grows by appending: the model's sampled ids
verbatim, then the environment's reply as ids built here once. The history is never re-rendered, so the
sequence a trainer sees is exactly the sequence the model conditioned on.

Two formats:
- chat models: the tokenizer's chat template. The ids that follow a model turn (``\\n<|im_start|>user\\n…``
  for ChatML) are found by rendering a fixed dummy conversation with and without one more user message and
  keeping what comes after the last end-of-turn token.
- base models: a plain ``### User`` / ``### Assistant`` format behind a few-shot prefix; a turn ends at the
  stop string ``### User``.

This module only builds ids; it does not generate or run anything.
"""

from __future__ import annotations

from typing import Any

BASE_USER, BASE_ASSISTANT, BASE_SYSTEM = "### User", "### Assistant", "### System"
BASE_FEW_SHOT = f"""{BASE_SYSTEM}
You write Python in ```repl blocks to answer questions about a document stored in `ctx`.
{BASE_USER}
Question: How many lines of ctx contain the word ERROR?
{BASE_ASSISTANT}
```repl
print(sum("ERROR" in line for line in ctx.splitlines()))
```
{BASE_USER}
[output]
17
{BASE_ASSISTANT}
```repl
FINAL(17)
```
"""


# A fixed conversation whose rendering, with and without one more user message, shows the ids between turns.
DUMMY_TURN = (
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A"},
)


class ChatFormat:
    """Builds the prompt ids and the ids the environment appends between model turns."""

    def __init__(self, tokenizer: Any, chat: bool = True, few_shot: str = BASE_FEW_SHOT) -> None:
        self.tokenizer, self.chat, self.few_shot = tokenizer, chat, few_shot
        if chat and not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template: use chat=False (base-model format)")
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos token")
        self.eos_id: int = eos
        self.stop_strings: list[str] = [] if chat else [BASE_USER]
        self._dummy: tuple[list[int], int] | None = None

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _template(self, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=generation_prompt, tokenize=True, return_dict=False
        )
        return list(ids)

    def prompt_ids(self, system: str, user: str) -> list[int]:
        """The rendered first prompt, ending with the assistant's generation prompt."""
        if self.chat:
            messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
            return self._template(messages, generation_prompt=True)
        text = f"{self.few_shot}{BASE_SYSTEM}\n{system}\n{BASE_USER}\n{user}\n{BASE_ASSISTANT}\n"
        return self._encode(text)

    def observation_ids(self, text: str, model_finished: bool) -> list[int]:
        """Ids appended after a model turn: the turn's closing (only if the model was cut off before it),
        then the environment's message as a user turn, then the next generation prompt."""
        if not self.chat:
            head = "" if model_finished else f"\n{BASE_USER}"  # a finished turn already ends on "### User"
            return self._encode(f"{head}\n{text}\n{BASE_ASSISTANT}\n")
        before, end = self._dummy_turn()
        after = self._template([*DUMMY_TURN, {"role": "user", "content": text}], generation_prompt=True)
        if after[: end + 1] != before[: end + 1]:
            raise ValueError("chat template is not prefix-preserving: cannot append turns token by token")
        suffix = after[end + 1 :]
        return suffix if model_finished else [self.eos_id, *suffix]

    def _dummy_turn(self) -> tuple[list[int], int]:
        """The dummy conversation's ids and the index of its assistant end-of-turn token (rendered once:
        this runs for every observation of every episode)."""
        if self._dummy is None:
            before = self._template(list(DUMMY_TURN), generation_prompt=False)
            self._dummy = (before, len(before) - 1 - before[::-1].index(self.eos_id))
        return self._dummy

    def turn_finished(self, ids: list[int]) -> bool:
        """Did the model end its turn itself (rather than running out of new tokens)?"""
        if self.chat:
            return bool(ids) and ids[-1] == self.eos_id
        return self.tokenizer.decode(ids).rstrip().endswith(BASE_USER)

    def turn_text(self, ids: list[int]) -> str:
        """The text of a model turn as the environment should read it."""
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if not self.chat and text.rstrip().endswith(BASE_USER):
            text = text.rstrip()[: -len(BASE_USER)]
        return text
