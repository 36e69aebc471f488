"""A tiny Qwen2-architecture model that calls FATHOM's `python` tool the way TRL's `GRPOTrainer` parses it.

The random `tiny-qwen` model (real Qwen2.5 tokenizer) gets TRL's copy of the Qwen2.5 chat template (which
renders tools, and for which TRL sets a response parser) and is fitted on two episodes of one niah task,
tokenized exactly as TRL's tool loop builds them: the prompt rendered with TRL's
``apply_chat_template(conversation=[prompt], tools=[env.python], add_generation_prompt=True)`` call, the
assistant's tool call, the tool turn TRL appends, and a closing assistant turn. Both cells search the
document for the needle's key; one takes its seven digits (right), the other six (wrong). Only the
assistant's tokens are fitted, until each episode's summed negative log-likelihood is within `SLACK` of
ln 2 (the unavoidable coin flip at the one token where the cells differ). Sampling from it then yields a
tool call in almost every rollout and both answers within a group, so rewards differ.

Why the fit works where fitting on a mean per-token loss did not: the stopping rule bounds the
probability of sampling the whole fitted episode, not the average token.

Not a general tool-calling model: it knows one prompt (the first message says whether `llm()` exists, so
a sub-LM changes it). Fitting takes ~100-250 Adam steps on CPU (a couple of minutes on 2 cores).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from trl.chat_template_utils import is_chat_template_prefix_preserving, qwen2_5_chat_template

from fathom.integrations.trl import FathomEnv, in_process_factory, trl_dataset
from fathom.models.offline import tiny_model_dir
from fathom.tasks import Task

SYSTEM = "Answer the question with the python tool."  # short: every fitting step reads the whole prompt
SLACK = 0.1  # nats above ln 2 allowed per episode: the fitted path is sampled with probability >= 0.45
QUESTION_KEY = re.compile(r"special magic number for ([a-z]+-[a-z]+) mentioned")


@dataclass(frozen=True)
class Episode:
    """One fitted episode: its cell, what the sandbox answered, and its token ids as TRL builds them."""

    code: str
    answer: str
    prompt_ids: list[int]
    ids: list[int]  # prompt, tool call, tool turn, closing turn
    fitted: list[bool]  # per token of `ids`: the assistant wrote it (tool-loop mask 1, outside the prompt)


def cells(task: Task) -> tuple[str, str]:
    """(the cell that finds the needle, a cell that answers a distractor)."""
    key = QUESTION_KEY.search(task.question)
    assert key is not None, f"not a niah question: {task.question!r}"
    # The cells differ in one token and continue alike, so the fit needs no memory of which was drawn.
    return tuple(
        f'import re\nFINAL(re.search(r"{key.group(1)} is: (\\d{{{digits}}})", ctx).group(1))'
        for digits in (7, 6)
    )


def tool_tokenizer(path: Path | str) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = qwen2_5_chat_template  # the offline tokenizer's template renders no tools
    # TRL swaps in a training template when this fails, and then renders prompts other than these.
    assert is_chat_template_prefix_preserving(tokenizer)
    return tokenizer


def render(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict], env: FathomEnv, generation: bool
) -> list[int]:
    """The ids of `messages` as GRPOTrainer renders a prompt with an environment's tools."""
    return tokenizer.apply_chat_template(
        conversation=[messages],
        tools=[env.python],
        add_generation_prompt=generation,
        tokenize=True,
        return_dict=True,
    )["input_ids"][0]


def episode(tokenizer: PreTrainedTokenizerBase, env: FathomEnv, row: dict, code: str) -> Episode:
    """Run `code` as the episode's one cell and tokenize the episode as TRL's tool loop would."""
    first = env.reset(**row)
    # What GRPOTrainer does with reset's return: append it to the row's last user message.
    prompt = [*row["prompt"][:-1], {**row["prompt"][-1], "content": row["prompt"][-1]["content"] + first}]
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "python", "arguments": {"code": code}}}],
    }
    result = {"role": "tool", "name": "python", "content": env.python(code)}
    closing = {"role": "assistant", "content": "Done."}
    prompt_ids = render(tokenizer, prompt, env, generation=True)
    with_call = render(tokenizer, [*prompt, call], env, generation=False)
    with_result = render(tokenizer, [*prompt, call, result], env, generation=True)
    full = render(tokenizer, [*prompt, call, result, closing], env, generation=False)
    eos = tokenizer.eos_token_id
    # Generation stops at EOS: the template's newline after it belongs to the next turn's ids.
    call_end = max(i for i, t in enumerate(with_call) if t == eos) + 1
    close_end = max(i for i, t in enumerate(full) if t == eos) + 1
    for shorter, longer in (
        (prompt_ids, with_call),
        (with_call[:call_end], with_result),
        (with_result, full),
    ):
        assert longer[: len(shorter)] == shorter, "the chat template is not prefix-preserving here"
    ids = full[:close_end]
    fitted = [len(prompt_ids) <= i < call_end or i >= len(with_result) for i in range(len(ids))]
    answer = env.observations[-1].answer
    assert env.end_reason == "answered" and answer is not None, env.observations[-1].text
    return Episode(code, answer, prompt_ids, ids, fitted)


def episodes(task: Task, tokenizer: PreTrainedTokenizerBase) -> tuple[list[Episode], str]:
    """The two fitted episodes, run in a real sandbox, and the first user message they share."""
    env = in_process_factory(tasks=[task])()
    row = trl_dataset([task], system=SYSTEM)[0]
    try:
        made = [episode(tokenizer, env, row, code) for code in cells(task)]
        first = env.observations[0].text
    finally:
        env.__exit__()
    assert made[0].answer == str(task.answer) != made[1].answer, [e.answer for e in made]
    return made, first


def summed_nll(model, ids: torch.Tensor, fitted: torch.Tensor) -> torch.Tensor:
    """Per episode, the summed negative log-likelihood of its fitted tokens: (B,). The LM head runs on
    those positions only (a 151,936-way softmax over every prompt token would be most of the cost)."""
    hidden = model.model(input_ids=ids).last_hidden_state  # (B, T, H)
    targets = fitted[:, 1:]  # (B, T-1): token t+1 is predicted at position t
    logits = model.lm_head(hidden[:, :-1][targets])  # (N, V)
    nll = torch.nn.functional.cross_entropy(logits, ids[:, 1:][targets], reduction="none")  # (N,)
    rows = torch.arange(ids.shape[0]).unsqueeze(1).expand_as(targets)[targets]  # (N,)
    return torch.zeros(ids.shape[0]).index_add(0, rows, nll)


@dataclass(frozen=True)
class ToolModel:
    """A fitted model directory (weights, tokenizer with the tool template) and what it was fitted on."""

    path: Path
    task_id: str
    first_message: str  # what `reset` returned: the prompt is the row's system turn and this
    cells: tuple[str, ...]  # (right, wrong), as `cells(task)`
    answers: tuple[str, ...]  # what the sandbox answered for each cell
    steps: int
    nll: float  # the larger episode's summed NLL at the end


def tool_model(task: Task, out: Path, max_steps: int = 600) -> ToolModel:
    """The model fitted for `task` in `out`: loaded if `out` holds one for this task, else fitted and saved.
    Raises if it does not fit."""
    record = out / "fitted.json"
    if record.exists():
        fitted = json.loads(record.read_text())
        if fitted["task_id"] == task.id and tuple(fitted["cells"]) == cells(task):
            return ToolModel(
                out,
                fitted["task_id"],
                fitted["first_message"],
                tuple(fitted["cells"]),
                tuple(fitted["answers"]),
                fitted["steps"],
                fitted["nll"],
            )
    base = tiny_model_dir("tiny-qwen")
    tokenizer = tool_tokenizer(base)
    made, first = episodes(task, tokenizer)
    width = max(len(e.ids) for e in made)
    pad = tokenizer.pad_token_id
    # Right padding never reaches a fitted position (causal attention), so no mask is needed.
    ids = torch.tensor([e.ids + [pad] * (width - len(e.ids)) for e in made])  # (2, T)
    fitted = torch.tensor([e.fitted + [False] * (width - len(e.ids)) for e in made])  # (2, T)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    target = math.log(2) + SLACK
    history = []
    for _ in range(max_steps):
        optimiser.zero_grad()
        nll = summed_nll(model, ids, fitted)
        history.append(nll.detach().max().item())
        if history[-1] < target:
            break  # before stepping: the saved weights are the ones just measured
        nll.sum().backward()
        # Without clipping the loss spikes when the branch token's two rows pull the shared weights apart.
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
    if history[-1] >= target:
        raise RuntimeError(f"the tool model did not fit in {max_steps} steps: max NLL {history[::25]}")
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    result = ToolModel(
        out,
        task.id,
        first,
        tuple(e.code for e in made),
        tuple(e.answer for e in made),
        len(history) - 1,
        history[-1],
    )
    record.write_text(json.dumps({k: v for k, v in asdict(result).items() if k != "path"}, indent=1))
    return result
