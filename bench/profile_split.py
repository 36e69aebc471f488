"""Where a GRPO step's CPU goes, from a py-spy profile of `fathom grpo` (issue #14).

    python bench/profile_split.py PROFILE[.gz] [--json FILE]

PROFILE is what ``py-spy record --subprocesses --nonblocking -f raw`` wrote while `scripts/gpu/rollouts.sh
grpo64` ran: one line per distinct stack, ``process A:"cmd";process B:"cmd";frame;frame;... COUNT``. py-spy
leaves out samples of threads that sleep (in a syscall or waiting on a lock), so a count is time a thread was
on the CPU or runnable, at the rate it sampled (``--rate``, 100 a second by default).

Prints, as seconds of samples:
- per process kind: the trainer (``-m fathom grpo``), the sandbox workers, and the rest (inductor's compile
  workers). The workers' figure is not CPU: between cells they are stopped (SIGSTOP), and py-spy counts a
  stopped process as busy in its blocking read;
- the trainer's threads: the vLLM driver (`fathom.rollout.service.VLLMService._loop`, which calls the
  colocated engine's ``step``) and the rest (the main thread: the episodes' asyncio loop, TRL, the optimiser);
- the vLLM thread by the part of vLLM's step a sample is in (scheduler, input preparation, the model's
  forward with and without a CUDA graph, sampling, output processing);
- the main thread by phase (engine start, rollouts, TRL's log-prob forward, the loss, the backward, the
  optimiser step, the weight sync).

It reads a profile; it does not take one, and it times nothing itself.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter
from pathlib import Path

VLLM_THREAD = "VLLMService._loop"
# the vLLM step's parts, first match wins (a forward's frames sit under execute_model, so they come first)
VLLM_PARTS = (
    ("CudaGraphManager", "model forward through vLLM's CUDA graph manager"),
    ("ForCausalLM.forward", "model forward without a CUDA graph"),
    ("Scheduler.schedule", "scheduler: schedule"),
    ("Scheduler.update_from_output", "scheduler: update from output"),
    ("prepare_inputs", "runner: prepare inputs"),
    ("Sampler", "sampler"),
    ("sample_tokens", "runner: sample tokens, other"),
    ("LogprobsProcessor", "output: log-probs to Python"),
    ("OutputProcessor", "output: other"),
    ("execute_model", "runner: execute model, other"),
    ("add_request", "add request"),
    ("LLMEngine.step", "engine step, other"),
)
# the main thread's phases, first match wins
MAIN_PHASES = (
    ("LLM.__init__", "vLLM engine start"),
    ("from_pretrained", "model load"),
    ("_move_model_to_vllm", "weight sync to vLLM"),
    ("sync_weights", "weight sync to vLLM"),
    ("rollout_func", "rollouts (episodes, sandbox traffic, tokenization)"),
    ("_get_per_token_logps", "TRL log-prob forward"),
    ("compute_loss", "loss forward"),
    ("backward", "backward"),
    ("step (torch/optim", "optimiser step"),
)


def read_profile(path: Path) -> list[tuple[list[str], list[str], int]]:
    """(process entries, frames, count) per line of a py-spy raw profile."""
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            parts = stack.split(";")
            procs = [p for p in parts if p.startswith("process ")]
            frames = [p for p in parts if not p.startswith("process ")]
            rows.append((procs, frames, int(count)))
    return rows


def process_kind(procs: list[str]) -> str:
    own = procs[-1] if procs else ""
    if "-m fathom grpo" in own:
        return "trainer"
    if "/sbx/worker.py" in own:
        return "sandbox workers (stopped between cells: not CPU)"
    return "other processes"


def first_match(stack: str, table: tuple[tuple[str, str], ...], default: str) -> str:
    return next((label for marker, label in table if marker in stack), default)


def split(rows: list[tuple[list[str], list[str], int]], rate: float) -> dict[str, dict[str, float]]:
    kinds: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    vllm: Counter[str] = Counter()
    main: Counter[str] = Counter()
    for procs, frames, n in rows:
        kind = process_kind(procs)
        kinds[kind] += n
        if kind != "trainer":
            continue
        stack = ";".join(frames)
        if VLLM_THREAD in stack:
            threads["vLLM driver thread"] += n
            vllm[first_match(stack, VLLM_PARTS, "other")] += n
        else:
            threads["main and other threads"] += n
            main[first_match(stack, MAIN_PHASES, "start-up, imports and other")] += n

    def seconds(c: Counter[str]) -> dict[str, float]:
        return {k: round(v / rate, 2) for k, v in c.most_common()}

    return {
        "processes": seconds(kinds),
        "trainer_threads": seconds(threads),
        "vllm_thread": seconds(vllm),
        "main_thread": seconds(main),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's samples a second")
    parser.add_argument("--json", type=Path, help="also write the split here")
    args = parser.parse_args()
    out = split(read_profile(args.profile), args.rate)
    for section, table in out.items():
        print(f"{section} (s of samples)")
        for name, s in table.items():
            print(f"  {s:9.2f}  {name}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
