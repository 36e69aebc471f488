"""A tiny Qwen2-architecture model that calls FATHOM's `python` tool: the random `tiny-qwen` model with
the real Qwen2.5 tokenizer and TRL's copy of the official Qwen2.5 chat template (which renders tools),
fitted for a few dozen Adam steps on two conversations about one task: half call ``FINAL(gold)``, half
``FINAL(wrong)``. So a GRPO group sampled from it has tool calls the trainer must parse and run, and
rewards that differ; a random model would call no tool at all."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl.chat_template_utils import qwen2_5_chat_template

from fathom.integrations.trl import FathomEnv, in_process_factory, trl_dataset
from fathom.models.offline import tiny_model_dir
from fathom.tasks import Task


def wrong_answer(gold: str) -> str:
    """Seven digits that differ from the gold's from the first one on."""
    return ("1" if gold[0] != "1" else "2") * len(gold)


def conversation(env: FathomEnv, row: dict, answer: str) -> list[dict]:
    first = env.reset(**row)
    code = f"FINAL({answer!r})"
    call = {"type": "function", "function": {"name": "python", "arguments": {"code": code}}}
    result = env.python(code)
    return [
        row["prompt"][0],
        {"role": "user", "content": first},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "python", "content": result},
        {"role": "assistant", "content": "Done."},
    ]


SYSTEM = "Answer the question with the python tool."  # short: every fitting step reads the whole prompt
# Both conversations share every token but the answer's: ln 2 each is the floor of their summed loss.
FITTED_LOSS = 2 * 0.6931 + 0.02


def build_tool_model(task: Task, out: Path, max_steps: int = 400) -> Path:
    """Fit and save the model (with its tokenizer) to `out`; returns `out`. Raises if it does not fit."""
    base = tiny_model_dir("tiny-qwen")
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.chat_template = qwen2_5_chat_template
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    env = in_process_factory(tasks=[task])()
    row = trl_dataset([task], system=SYSTEM)[0]
    sequences = []
    try:
        for answer in (str(task.answer), wrong_answer(str(task.answer))):
            messages = conversation(env, row, answer)
            prompt = tokenizer.apply_chat_template(
                messages[:2], tools=[env.python], add_generation_prompt=True, return_dict=False
            )
            full = tokenizer.apply_chat_template(messages, tools=[env.python], return_dict=False)
            assert full[: len(prompt)] == prompt, "the template is not prefix-preserving"
            sequences.append(full)
    finally:
        env.__exit__()
    assert len(sequences[0]) == len(sequences[1]), "the two answers should tokenize to the same length"
    ids = torch.tensor(sequences)  # (2, T)
    labels = ids.clone()
    labels[:, : len(prompt)] = -100  # fit the assistant's side (and the tool turn), not the prompt
    torch.manual_seed(0)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    losses = []
    for _ in range(max_steps):
        optimiser.zero_grad()
        loss = model(input_ids=ids, labels=labels).loss * 2  # the sum of the two conversations' means
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        if losses[-1] < FITTED_LOSS:
            break
    if losses[-1] >= FITTED_LOSS:
        raise RuntimeError(f"the tool model did not fit in {max_steps} steps: losses {losses[::10]}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "fitted.json").write_text(
        json.dumps({"task_id": task.id, "steps": len(losses), "loss": losses[-1]})
    )
    return out
