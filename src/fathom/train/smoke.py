"""``fathom smoke``: a preflight gate for training, about a minute on a CPU.

    fathom smoke [--config configs/tiny-cpu.toml] [--section.key=value ...]

Checks, in order, each with a verdict, its time and what it saw:

1. environment — a sandboxed REPL starts with the required isolation and runs a cell;
2. expert episode — the scripted expert solves a task through the rollout engine (environment, REPL, reward);
3. policy rollout — the configured policy completes a multi-turn rollout: token-exact lengths, an env mask
   with both kinds of token, ending on a model token;
4. reward — every reward seen is finite;
5. GRPO step — one optimizer step through TRL with our rollout function; the loss is finite and the
   weights moved (a fixed probe reward on the sampled ids is added to the environment's, so the
   step has an advantage to follow even when an untrained policy earns nothing from the task);
6. checkpoint — the step's checkpoint exists, carries the recipe state, and reloads into the same outputs.

The run shrinks whatever config it is given (one step, one group of two, short turns) so that it stays a
preflight. It writes ``RUN/SMOKE_RESULT.md`` (default run dir ``runs/smoke``) and exits non-zero when any
check fails; a check that needs an earlier one that failed is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fathom.train.cli import add_config_arguments, config_from_args
from fathom.train.config import TrainConfig
from fathom.train.configfile import config_from_dict, merge, to_dict

SHRINK = {
    "grpo": {
        "max_steps": 1,
        "num_generations": 2,
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 1,
    },
    "rollout": {"max_turns": 2, "max_new_tokens": 24, "max_total_tokens": 160, "sub_max_new_tokens": 16},
    "eval": {"every": 0},
    "checkpoint": {"export_merged": False},
    "logging": {"progress": False, "tensorboard": False, "wandb": False},
}


def probe_reward(completion_ids: list[list[int]], **_: Any) -> list[float]:
    """A fixed function of the sampled ids: gives a group reward variance, so one step must move weights."""
    return [(sum(ids) % 997) / 997 for ids in completion_ids]


@dataclasses.dataclass
class Check:
    name: str
    ok: bool | None  # None: skipped
    seconds: float
    detail: str


class Smoke:
    def __init__(self, config: TrainConfig) -> None:
        data = merge(to_dict(config), SHRINK)
        data["run"]["resume"] = "never"
        self.config = config_from_dict(data)
        self.run_dir = Path(self.config.run.run_dir)
        self.checks: list[Check] = []
        self.facts: dict[str, Any] = {}
        self.run: Any = None  # the GRPO run, once built
        self.device = self.config.run.device

    def check(self, name: str, needs: tuple[str, ...], fn: Callable[[], str]) -> None:
        failed = [c.name for c in self.checks if c.name in needs and not c.ok]
        if failed:
            self.checks.append(Check(name, None, 0.0, f"skipped: needs {', '.join(failed)}"))
            return
        started = time.perf_counter()
        try:
            detail, ok = fn(), True
        except Exception as exc:  # a preflight reports every failure instead of stopping at the first
            detail, ok = f"{type(exc).__name__}: {exc}\n\n```\n{traceback.format_exc(limit=6)}```", False
        self.checks.append(Check(name, ok, time.perf_counter() - started, detail))

    # ---- the checks -------------------------------------------------------------------------------------
    def environment(self) -> str:
        from fathom.sandbox import Sandbox, SandboxConfig

        async def go() -> tuple[str, str]:
            async with await Sandbox.start(None, SandboxConfig(), ctx_text="hello") as box:
                result = await box.execute("print(len(ctx) * 2)")
                return box.report.describe(), result.stdout.strip()

        report, out = asyncio.run(go())
        if out != "10":
            raise AssertionError(f"the REPL printed {out!r}, expected '10'")
        return report

    def expert(self) -> str:
        from fathom.models import load_tokenizer
        from fathom.models.loading import ModelSpec
        from fathom.policies.readers import expert_reader
        from fathom.policies.scripted import expert_backend
        from fathom.rollout import ChatFormat, RolloutConfig
        from fathom.rollout.wiring import build_engine, hf_service
        from fathom.tasks import generate_task

        c = self.config
        tokenizer = load_tokenizer(ModelSpec(name=c.model.name, chat=c.model.chat))
        chat = ChatFormat(tokenizer, chat=c.model.chat)
        task = generate_task("vartrack", 1, 8192)
        engine = build_engine(
            hf_service(expert_backend(chat, [task])), chat, RolloutConfig(max_turns=12), expert_reader()
        )
        (episode,) = engine.run_sync([task])
        self.facts.setdefault("rewards", []).append(episode.total_reward)
        if not episode.correct:
            raise AssertionError(
                f"the expert failed {task.id}: {episode.end_reason}, reward {episode.total_reward}"
            )
        return f"{task.id}: correct in {len(episode.turns)} turns, reward {episode.total_reward:.3f}"

    def build(self) -> str:
        from fathom.train.grpo import build_grpo

        self.run = build_grpo(self.config, [probe_reward])
        self.device = str(self.run.trainer.args.device)
        return f"{self.config.model.name} on {self.device}"

    def policy_rollout(self) -> str:
        from fathom.train.tasksource import TaskSource

        source = TaskSource(self.config.curriculum.tiers, self.config.run.seed)
        task = source.task(0, 0, 0)
        (r,) = self.run.rollout.run_episodes(self.run.trainer, [task], self.run.rollout.sampling())[0]
        self.facts.setdefault("rewards", []).append(r.total_reward)
        if r.end_reason is None or r.reward is None:
            raise AssertionError(f"the rollout did not finish with a reward: {r.end_reason}")
        if not (len(r.completion_ids) == len(r.env_mask) and r.env_mask and r.env_mask[-1] == 1):
            raise AssertionError(
                "completion ids and env mask disagree, or the rollout ends on environment tokens"
            )
        if len(r.turns) >= 2 and 0 not in r.env_mask:
            raise AssertionError("a multi-turn rollout has no environment tokens")
        return f"{task.id}: {len(r.turns)} turns, {sum(r.env_mask)} sampled + {r.env_mask.count(0)} env tokens, ended {r.end_reason}"

    def reward(self) -> str:
        rewards = self.facts.get("rewards", [])
        if not rewards or not all(x is not None and math.isfinite(x) for x in rewards):
            raise AssertionError(f"rewards not all finite: {rewards}")
        return f"finite: {rewards}"

    def grpo_step(self) -> str:
        import torch

        trainer = self.run.trainer
        trainable = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        result = trainer.train()
        loss = result.training_loss
        if trainer.state.global_step != 1 or not math.isfinite(loss):
            raise AssertionError(f"step {trainer.state.global_step}, loss {loss}")
        after = dict(trainer.model.named_parameters())
        moved = [n for n, before in trainable.items() if not torch.equal(before, after[n].detach())]
        if not moved or not all(torch.isfinite(p).all() for p in after.values()):
            raise AssertionError(f"{len(moved)} of {len(trainable)} trainable tensors moved; weights finite?")
        # (a fresh LoRA's A matrices get no gradient while B is still zero: they move from the second step)
        return (
            f"1 step, loss {loss:.4g}, {len(moved)}/{len(trainable)} trainable tensors moved, "
            f"{trainer.state.num_input_tokens_seen} tokens seen"
        )

    def checkpoint(self) -> str:
        import torch

        from fathom.train import checkpoint
        from fathom.train.policy import load_policy

        path = checkpoint.latest(self.run_dir)
        if path is None or path.name != "checkpoint-1":
            raise AssertionError(f"no checkpoint-1 in {self.run_dir}")
        state = checkpoint.read_state(path)
        trained = self.run.trainer.accelerator.unwrap_model(self.run.trainer.model)
        device = str(next(trained.parameters()).device)
        model_cfg = self.config.model
        if model_cfg.lora:  # the checkpoint is an adapter: load it over the base like `init_from` does
            model_cfg = dataclasses.replace(model_cfg, init_from=str(path))
        else:
            model_cfg = dataclasses.replace(model_cfg, name=str(path), init_from="")
        reloaded, _ = load_policy(model_cfg, device)
        ids = torch.tensor([self.run.rollout.chat.prompt_ids("", "smoke")], device=device)
        trained.eval()
        reloaded.eval()
        with torch.no_grad():
            a, b = trained(input_ids=ids).logits, reloaded(input_ids=ids).logits
        if not torch.allclose(a, b, atol=1e-5, rtol=1e-4):
            raise AssertionError(f"reloaded outputs differ by {float((a - b).abs().max()):.3g}")
        return f"{path.name}: step {state['step']}, tier {state['recipe']['tier']}, reloaded outputs match"

    def run_all(self) -> bool:
        self.check("environment", (), self.environment)
        self.check("expert episode", ("environment",), self.expert)
        self.check("build trainer", (), self.build)
        self.check("policy rollout", ("environment", "build trainer"), self.policy_rollout)
        self.check("reward", ("expert episode", "policy rollout"), self.reward)
        self.check("GRPO step", ("policy rollout",), self.grpo_step)
        self.check("checkpoint", ("GRPO step",), self.checkpoint)
        return all(c.ok for c in self.checks)

    def report(self) -> str:
        ok = all(c.ok for c in self.checks)
        lines = [
            f"# FATHOM smoke: {'PASS' if ok else 'FAIL'}",
            "",
            f"model `{self.config.model.name}`, device `{self.device}`, run dir `{self.run_dir}`",
            "",
            "| check | verdict | seconds |",
            "|---|---|---|",
        ]
        for c in self.checks:
            verdict = "skipped" if c.ok is None else ("PASS" if c.ok else "FAIL")
            lines.append(f"| {c.name} | {verdict} | {c.seconds:.1f} |")
        lines.append("")
        for c in self.checks:
            lines += [f"## {c.name}", "", c.detail, ""]
        return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if config is None:  # --print-config
        return 0
    smoke = Smoke(config)
    smoke.run_dir.mkdir(parents=True, exist_ok=True)
    for old in smoke.run_dir.glob("checkpoint-*"):  # a smoke run always starts fresh
        shutil.rmtree(old)
    for name in ("metrics.jsonl", "traces.jsonl", "SMOKE_RESULT.md"):
        (smoke.run_dir / name).unlink(missing_ok=True)
    started = time.perf_counter()
    ok = smoke.run_all()
    out = smoke.run_dir / "SMOKE_RESULT.md"
    out.write_text(smoke.report() + f"\ntotal {time.perf_counter() - started:.0f} s\n", encoding="utf-8")
    for c in smoke.checks:
        print(
            f"{'skip' if c.ok is None else 'PASS' if c.ok else 'FAIL':>4}  {c.name:<16} {c.seconds:6.1f}s  {c.detail.splitlines()[0]}"
        )
    print(f"{'PASS' if ok else 'FAIL'}: {out}")
    return 0 if ok else 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "smoke", help="preflight: environment, rollout, reward, one GRPO step, checkpoint"
    )
    add_config_arguments(parser, default_run_dir="runs/smoke")
    parser.set_defaults(func=main)
