"""The model card of an exported FATHOM policy: YAML front matter, how it was trained, its evaluation table.

`read_evals(dirs)` reads the ``summary.json`` that `fathom eval` writes at the end of an evaluation (a
directory holding one, or a directory of such directories, e.g. ``RUN/evals``). Only finished evaluations
have one, so an eval that was interrupted is not published. `model_card(...)` renders the card: the front
matter (``base_model`` only when the base is a hub id, ``library_name``, tags, ``license`` when the base's
own card in a local directory or the local hub cache names one), what the model is, the training settings
from the run's resolved config, one table per evaluation grouping (all, family, length: n, accuracy and its
95% Wilson interval, as `fathom.eval.stats.summarize` computed them) and the full config as TOML.

This module renders text only; writing weights and uploading are `fathom.publish.export`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fathom.eval.runner import SUMMARY_FILE
from fathom.eval.stats import groups
from fathom.report.runs import POLICY_ORDER
from fathom.train.config import TrainConfig

TAGS = ("fathom", "rlm")


@dataclass(frozen=True)
class EvalSummary:
    """One finished evaluation, as `fathom eval` summarised it."""

    label: str
    policy: str
    model: str | None  # None for the scripted policies (teacher, expert)
    tasks: str  # the task file's stem ("heldout", "heldout_unseen"): the split
    directory: Path
    groups: Mapping[str, Mapping[str, float]]


def _read_summary(path: Path) -> EvalSummary:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("groups"), dict):
        raise ValueError(f"{path} is not a `fathom eval` summary (it has no 'groups')")
    task_file = data.get("task_file")
    return EvalSummary(
        label=str(data.get("label") or path.parent.name),
        policy=str(data.get("policy") or "?").split(":")[0],
        model=data.get("model"),
        tasks=Path(task_file).stem if task_file else "?",
        directory=path.parent,
        groups=data["groups"],
    )


def read_evals(dirs: Sequence[Path]) -> list[EvalSummary]:
    """Every eval summary in `dirs` (each an eval directory or a directory of them), in report order
    (baselines, then FATHOM policies, then the expert), each directory once."""
    found: dict[Path, EvalSummary] = {}
    for d in dirs:
        d = Path(d)
        candidates = (
            [d / SUMMARY_FILE] if (d / SUMMARY_FILE).is_file() else sorted(d.glob(f"*/{SUMMARY_FILE}"))
        )
        if not candidates:
            raise FileNotFoundError(f"{d} holds no eval {SUMMARY_FILE} (nor do its subdirectories)")
        for path in candidates:
            found.setdefault(path.resolve(), _read_summary(path))
    return sorted(found.values(), key=lambda e: (POLICY_ORDER.get(e.policy, 1), e.tasks, e.label))


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def eval_tables(evals: Sequence[EvalSummary], run_dir: Path) -> str:
    """Markdown tables: every evaluation overall, then by family and by length where it has them."""
    if not evals:
        return (
            "No finished evaluation was found (`fathom eval ... --out RUN/evals/NAME`, then export again).\n"
        )

    def model_name(e: EvalSummary) -> str:
        if e.model is None:
            return "scripted"
        path = Path(e.model)
        try:  # this run's own weights read best relative to the run
            return f"this run: {path.resolve().relative_to(run_dir.resolve())}"
        except ValueError:
            return e.model

    head = ["policy", "label", "model", "tasks"]
    out = [_row([*head, "n", "accuracy", "95% CI"]), _row(["---"] * (len(head) + 3))]
    for e in evals:
        s = e.groups.get("all")
        stats = (
            [s["n"], _pct(s["accuracy"]), f"{_pct(s['ci_low'])} – {_pct(s['ci_high'])}"]
            if s
            else [0, "—", "—"]
        )
        out.append(_row([e.policy, e.label, model_name(e), e.tasks, *stats]))
    for kind in ("family", "length"):
        rows = [
            _row(
                [
                    e.label,
                    e.tasks,
                    name,
                    s["n"],
                    _pct(s["accuracy"]),
                    f"{_pct(s['ci_low'])} – {_pct(s['ci_high'])}",
                ]
            )
            for e in evals
            for name, s in groups(e.groups, kind).items()
        ]
        if rows:
            out += ["", f"By {kind}:", "", _row(["label", "tasks", kind, "n", "accuracy", "95% CI"])]
            out += [_row(["---"] * 6), *rows]
    return "\n".join(out) + "\n"


def training_summary(config: TrainConfig, stage: str, step: int | None, checkpoint: str) -> str:
    """The settings that say what was trained, as a bullet list (the full config follows in the card)."""
    m = config.model
    lines = [f"- Base model: `{m.name}`" + (f", initialised from `{m.init_from}`" if m.init_from else "")]
    if m.lora:
        targets = ", ".join(m.lora_targets)
        quant = " over a 4-bit (QLoRA) base" if m.load_in_4bit else ""
        lines.append(
            f"- LoRA{quant}: rank {m.lora_r}, alpha {m.lora_alpha}, dropout {m.lora_dropout}, on {targets}"
        )
    else:
        lines.append("- Full fine-tune (every weight trained)")
    if stage == "sft":
        s = config.sft
        lines.append(
            f"- SFT on `{s.source}` transcripts: {s.num_tasks} tasks of tier {s.tier}, {s.epochs} epochs, "
            f"learning rate {s.learning_rate}, reader rows per transcript {s.reader_ratio}"
        )
    else:
        g, r = config.grpo, config.rollout
        lines.append(
            f"- GRPO (`{g.loss_type}` loss, beta {g.beta}): {g.num_generations} rollouts per task, learning rate "
            f"{g.learning_rate}, at most {g.max_steps} steps; rollouts of up to {r.max_turns} turns, "
            f"{r.max_new_tokens} new tokens a turn, temperature {r.temperature}, `llm()` answered by `{r.sub_lm}`"
        )
        tiers = "; ".join(
            f"{t.name} ({', '.join(map(str, t.lengths))} tokens, {', '.join(t.families) or 'all families'})"
            for t in config.curriculum.tiers
        )
        lines.append(f"- Curriculum: {tiers}")
        if config.penalty.enabled:
            lines.append(f"- Adaptive token-budget penalty, accuracy floor {config.penalty.accuracy_floor}")
    lines.append(f"- Weights from `{checkpoint}`" + (f", after {step} steps" if step is not None else ""))
    return "\n".join(lines) + "\n"


def base_license(base: str) -> str | None:
    """The license the base's own card declares, from a local model directory or the local hub cache."""
    from huggingface_hub import ModelCard, try_to_load_from_cache

    local = Path(base).expanduser() / "README.md"
    if local.is_file():
        path: Path | None = local
    else:
        cached = try_to_load_from_cache(base, "README.md") if base.count("/") == 1 else None
        path = Path(cached) if isinstance(cached, str) else None
    if path is None:
        return None
    license_ = ModelCard.load(path, ignore_metadata_errors=True).data.license
    return str(license_) if license_ else None


def is_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not name.startswith((".", "/", "~")) and not Path(name).exists()


def model_card(
    *,
    config: TrainConfig,
    config_toml: str,
    base: str,
    library_name: str,
    stage: str,
    step: int | None,
    checkpoint: str,
    evals: Sequence[EvalSummary],
    run_dir: Path,
) -> str:
    """The whole card (README.md) for one weights directory; `library_name` is peft (adapter) or
    transformers (merged or full model)."""
    from huggingface_hub import ModelCardData

    data = ModelCardData(
        base_model=base if is_hub_id(base) else None,
        library_name=library_name,
        license=base_license(base),
        tags=[*TAGS, stage, *(["lora"] if config.model.lora else [])],
        pipeline_tag="text-generation",
    )
    if library_name == "peft":
        usage = "Load it with `PeftModel.from_pretrained(base, <this folder>)` over the base model."
    elif config.model.lora:
        usage = "It loads with `AutoModelForCausalLM.from_pretrained`; the adapter was merged in 16-bit, never 4-bit."
    else:
        usage = "It loads with `AutoModelForCausalLM.from_pretrained` (16-bit weights)."
    return "\n".join(
        [
            f"---\n{data.to_yaml()}\n---",
            "",
            f"# FATHOM RLM policy ({stage.upper()}) over `{base}`",
            "",
            "A Recursive Language Model (RLM) policy trained with FATHOM: given a question about",
            "a document far longer than its context window, it writes Python in a sandboxed REPL where the",
            "document is the string `ctx`, reads it piece by piece, delegates reading of chunks to `llm(prompt,",
            "chunk)` sub-calls, and answers with `FINAL(value)`. It is meant to be run inside that scaffold",
            "(`fathom eval --policy rlm --model <this model>`); prompted directly it is an ordinary chat model.",
            usage,
            "",
            "## Training",
            "",
            training_summary(config, stage, step, checkpoint),
            "## Evaluation",
            "",
            "Held-out tasks, scored by FATHOM's verifiers; intervals are 95% Wilson score intervals.",
            "",
            eval_tables(evals, run_dir),
            "## Configuration",
            "",
            f"The run's resolved config (`fathom {stage} --config config.toml` with it reruns the recipe):",
            "",
            "```toml",
            config_toml.rstrip("\n"),
            "```",
            "",
        ]
    )
