"""GPU generation figures for issue #14, every one beside its baseline and its numerics check in the same run.

    python bench/gpu_rollouts.py decode --model "$M" --out bench/results/gpu_rollouts_decode.json
    python bench/gpu_rollouts.py engine --model "$M" --tasks 64 --out ...
    python bench/gpu_rollouts.py spec --model "$M" --tasks 64 [--ngram-speculative-tokens 4] --out ...

``decode``: tok/s of plain HF ``generate`` and of vLLM (one ``vllm.LLM``, the engine TRL colocates) at batch
64, 256 and 1024 on real RLM prompts, without and with a LoRA adapter (r=32 on every linear layer, random
non-zero B so it changes the model). With LoRA, HF generates through the PEFT model (how GRPO generates
without vLLM) and vLLM holds the merged weights, pushed into the running engine the way TRL's
``sync_weights`` does (``model.load_weights``). Numerics: for each path, greedy outputs on 8 prompts are
scored by one eager forward of the same model (PEFT model with LoRA) over prompt + output; the column is
``max |log-prob(path) - log-prob(eager)|`` over the first 32 tokens, plus the share of greedy tokens equal to
the eager argmax.

``engine``: the rollout engine on real tasks (the untrained model in the scaffold, 4 turns x 384 tokens,
its own llm() calls), through vLLM with continuous batching (each turn and sub-call sent when ready) and
with turn-synchronous batches (``RolloutConfig.sync_turns``), same tasks, greedy; wall time and sampled
tok/s of each, and the ratio. ``--async-scheduling`` / ``--max-num-batched-tokens`` / ``--max-num-seqs``
set the engine's scheduler (`fathom.rollout.vllm_options`; vLLM's defaults otherwise).

``spec``: the rollout engine on the same real tasks (as ``engine``, continuous batching, greedy) through two
engines, without and with n-gram speculative decoding (``--ngram-speculative-tokens``,
`fathom.rollout.vllm_options`), each in a process of its own (``spec-engine``), one after the other, each run
twice: wall time and sampled tok/s of each and the ratio.
Numerics in the same run: each engine's greedy outputs on 8 prompts scored by the eager model (as ``decode``
checks its paths); and greedy decoding with speculation must give the engine's own outputs, so every turn's
token ids are compared with the run without it (the share of turns identical, and of tokens up to the first
difference), and over the identical prefixes ``max |log-prob(spec) - log-prob(no spec)|``.

``levers``: reads the GRPO runs ``scripts/gpu/rollouts.sh levers64 / levers256`` made (today's settings and
the speed levers, same machine, same warm start) and puts them side by side: per run the measured steps
(step 1, with the engine's warm-up, left out), their step / generate / env / optimise seconds and sampled
tok/s, TRL's ``sampling/sampling_logp_difference`` (vLLM's log-probs against the trainer's, numerics beside
speed), what vLLM's log says it ran with (async scheduling, batched tokens), and levers over baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def prompts_for(chat: Any, n: int) -> list[list[int]]:
    from fathom.env.prompts import first_user_message, system_prompt
    from fathom.tasks import generate_task

    families = ["niah", "multikey", "vartrack", "oolong", "pairs", "babi", "keychain"]
    out = []
    for i in range(n):
        t = generate_task(families[i % len(families)], i, 8192)
        out.append(
            chat.prompt_ids(
                system_prompt(16_000), first_user_message(t.question, t.length_chars, t.length_tokens, True)
            )
        )
    return out


def eager_check(model: Any, prompts: list[list[int]], gens: list[Any]) -> tuple[float, float]:
    """(max |log-prob - eager|, share of tokens equal to the eager argmax) over greedy generations."""
    import torch

    worst, same, total = 0.0, 0, 0
    device = next(model.parameters()).device
    for ids, gen in zip(prompts, gens, strict=True):
        out = gen.ids[:32]
        if not out:
            continue
        seq = torch.tensor([ids + out], device=device)
        with torch.no_grad():
            logits = model(seq).logits[0, len(ids) - 1 : len(ids) - 1 + len(out)].float()
        lp = logits.log_softmax(-1)
        chosen = lp.gather(-1, torch.tensor(out, device=device)[:, None])[:, 0]
        if gen.logprobs is not None:
            worst = max(
                worst, (chosen - torch.tensor(gen.logprobs[: len(out)], device=device)).abs().max().item()
            )
        same += int((lp.argmax(-1) == torch.tensor(out, device=device)).sum())
        total += len(out)
    return worst, same / max(total, 1)


def add_lora(model: Any) -> Any:
    import torch
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(
        model, LoraConfig(r=32, lora_alpha=64, target_modules="all-linear", lora_dropout=0.0)
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.002)
    return peft.eval()


def push_merged(llm: Any, peft: Any) -> None:
    """The merged LoRA weights into the running engine, as TRL's colocate sync_weights does."""
    peft.merge_adapter()
    try:
        weights = []
        for name, param in peft.named_parameters():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if peft.prefix in name or "original_module" in name:
                continue
            weights.append((name, param.data))
        runner = llm.llm_engine.model_executor.driver_worker.model_runner
        runner.model.load_weights(weights)
        llm.reset_prefix_cache()
    finally:
        peft.unmerge_adapter()


def decode(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fathom.models.loading import resolve_model_dir
    from fathom.rollout import ChatFormat, HFBackend, Sampling, VLLMBackend

    path = str(resolve_model_dir(args.model))
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    chat = ChatFormat(tok)
    prompts = prompts_for(chat, max(args.batches))
    started = time.perf_counter()
    vllm = VLLMBackend(path, gpu_memory_utilization=0.3, max_model_len=8192, dtype="bfloat16")
    engine_start_s = time.perf_counter() - started
    print(
        f"vLLM engine start {engine_start_s:.1f} s; prompts {len(prompts[0])}-{max(map(len, prompts))} tokens"
    )
    timed = Sampling(max_new_tokens=args.new_tokens, temperature=1.0, ignore_eos=True)
    greedy = Sampling(max_new_tokens=32, temperature=0.0, logprobs=True)
    rows = []
    for lora in (False, True):
        policy = add_lora(model) if lora else model
        if lora:
            push_merged(vllm.llm, policy)
        paths = {"plain": HFBackend(policy, tok, mode="plain"), "vllm": vllm}
        checks = {}
        for name, backend in paths.items():
            gens = backend.generate(prompts[:8], greedy)
            checks[name] = eager_check(policy, prompts[:8], gens)
        for batch in args.batches:
            base = None
            for name, backend in paths.items():
                backend.generate(prompts[:batch][:8], Sampling(max_new_tokens=8, ignore_eos=True))  # warm
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = backend.generate(prompts[:batch], timed)
                torch.cuda.synchronize()
                secs = time.perf_counter() - t0
                tok_s = sum(len(g.ids) for g in out) / secs
                base = base or tok_s
                err, agree = checks[name]
                row = {"path": name, "batch": batch, "lora": lora, "tok_s": round(tok_s, 1),
                       "x_plain": round(tok_s / base, 2), "max_logprob_err": round(err, 4),
                       "greedy_eq_eager_argmax": round(agree, 4), "seconds": round(secs, 2)}  # fmt: skip
                print(json.dumps(row), flush=True)
                rows.append(row)
        if lora:
            policy.unload()
    return {"decode": rows, "engine_start_s": round(engine_start_s, 1), "model": args.model,
            "new_tokens": args.new_tokens, "device": torch.cuda.get_device_name()}  # fmt: skip


def rlm_tasks(n: int) -> list[Any]:
    """The `engine` and `spec` benchmarks' tasks: 7 original families, 8K-32K tokens."""
    from fathom.tasks import generate_task

    families = ["niah", "multikey", "vartrack", "oolong", "pairs", "babi", "keychain"]
    return [generate_task(families[i % 7], 100 + i, 8192 * (1 + i % 4)) for i in range(n)]


def rlm_config(temperature: float, sync_turns: bool = False) -> Any:
    """4 turns x 384 tokens (2,560 in all), the policy's own llm() replies of up to 96 tokens, greedy."""
    from fathom.rollout import RolloutConfig, Sampling

    return RolloutConfig(
        max_turns=4,
        max_total_tokens=2560,
        sampling=Sampling(max_new_tokens=384, temperature=temperature, logprobs=True),
        sub_sampling=Sampling(max_new_tokens=96, temperature=0.0),
        context_tokens=8192,
        sync_turns=sync_turns,
    )


def timed_episodes(llm: Any, chat: Any, config: Any, tasks: list[Any]) -> tuple[list[Any], dict[str, Any]]:
    """The tasks played through `llm` by the rollout engine, and the run's wall time and sampled tokens."""
    from fathom.rollout.wiring import build_engine, running, vllm_service

    service = vllm_service(llm)
    eng = build_engine(service, chat, config, "policy")
    t0 = time.perf_counter()
    with running(service):
        episodes = eng.run_sync(tasks)
    wall = time.perf_counter() - t0
    s = service.stats
    row = {"wall_s": round(wall, 2), "sampled_tokens": s.tokens, "tok_s": round(s.tokens / wall, 1),
           "requests": s.requests, "peak_batch": s.peak_batch,
           "subcalls": sum(len(e.subcalls) for e in episodes),
           "turns": sum(len(e.turns) for e in episodes), "correct": sum(e.correct for e in episodes)}  # fmt: skip
    return episodes, row


def engine(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoTokenizer

    from fathom.models.loading import resolve_model_dir
    from fathom.rollout import ChatFormat, VLLMBackend
    from fathom.rollout.vllm_options import VLLMEngineOptions, merged_kwargs

    path = str(resolve_model_dir(args.model))
    chat = ChatFormat(AutoTokenizer.from_pretrained(path))
    options = VLLMEngineOptions(args.async_scheduling, args.max_num_batched_tokens, args.max_num_seqs)
    llm = VLLMBackend(
        path, gpu_memory_utilization=0.3, max_model_len=8192, dtype="bfloat16", **merged_kwargs({}, options)
    ).llm
    tasks = rlm_tasks(args.tasks)
    out = {}
    for sync in (True, False, True, False):  # each mode twice, interleaved
        _, row = timed_episodes(llm, chat, rlm_config(args.temperature, sync), tasks)
        key = "turn_sync" if sync else "continuous"
        print(key, json.dumps(row), flush=True)
        out.setdefault(key, []).append(row)
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in out.items()}
    ratio = best["continuous"]["tok_s"] / best["turn_sync"]["tok_s"]
    print(f"continuous / turn-synchronous sampled tok/s: {ratio:.2f}x")
    return {"engine": out, "continuous_over_sync": round(ratio, 2), "tasks": args.tasks, "options": vars(options),
            "device": torch.cuda.get_device_name()}  # fmt: skip


STEP_KEYS = {
    "step_s": "time/step_s",
    "generate_s": "time/generate_s",
    "env_s": "time/env_s",
    "optimise_s": "time/optimise_s",
    "sampled_tok_s": "throughput/generate_tokens_per_s",
    "logp_diff_mean": "sampling/sampling_logp_difference/mean",
    "logp_diff_max": "sampling/sampling_logp_difference/max",
}
PAIRS = (("base64", "levers64"), ("base256", "levers256"))


def engine_settings(log: str) -> dict[str, Any]:
    """What vLLM says it ran with, from its start-up lines in a run's log; None where it said nothing (the
    stage's own echoed command line, "+ fathom grpo ... --rollout.vllm_max_num_batched_tokens=N", is not
    the engine's word and is skipped)."""
    import re

    log = "\n".join(line for line in log.splitlines() if not line.startswith("+ "))
    scheduling = re.findall(r"Asynchronous scheduling is (enabled|disabled)", log)
    tokens = re.findall(r"max_num_batched_tokens=(\d+)", log)
    return {"async_scheduling": scheduling[-1] if scheduling else None,
            "max_num_batched_tokens": int(tokens[-1]) if tokens else None}  # fmt: skip


def run_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's steps after the first (which includes the engine's warm-up) and their means."""
    steps = [r for r in rows if "time/step_s" in r][1:]
    if not steps:
        raise ValueError("no step after the warm-up one: run with GRPO_STEPS >= 2")
    out: dict[str, Any] = {"steps": [{k: r.get(v) for k, v in STEP_KEYS.items()} for r in steps]}
    for key in STEP_KEYS:
        values = [s[key] for s in out["steps"] if s[key] is not None]
        out[key] = round(sum(values) / len(values), 4) if values else None
    return out


def levers(args: argparse.Namespace) -> dict[str, Any]:
    from fathom.train.runlog import read_jsonl

    out: dict[str, Any] = {}
    for base, lever in PAIRS:
        runs = {}
        for name in (base, lever):
            metrics = args.runs / name / "metrics.jsonl"
            if not metrics.exists():
                break
            runs[name] = run_summary(read_jsonl(metrics))
            log = (args.logs or args.runs) / f"{name}.log"
            runs[name]["engine"] = engine_settings(log.read_text() if log.exists() else "")
        if len(runs) < 2:
            continue
        b, lv = runs[base], runs[lever]
        runs["speedup"] = {k: round(b[k] / lv[k], 3) for k in ("step_s", "generate_s", "optimise_s") if lv[k]}
        runs["speedup"]["sampled_tok_s"] = round(lv["sampled_tok_s"] / b["sampled_tok_s"], 3)
        print(base, "->", lever, json.dumps(runs["speedup"]), flush=True)
        out[base.removeprefix("base")] = runs
    if not out:
        raise SystemExit(f"no baseline / levers pair of runs under {args.runs}")
    return {"levers": out, "lever_args": args.lever_args}


def turn_agreement(plain: list[Any], spec: list[Any]) -> dict[str, Any]:
    """How far the speculative run's turns agree with the plain run's, episode by episode (same tasks, greedy):
    the share of turns with identical token ids, the share of tokens before each turn's first difference,
    and the largest log-prob gap over those identical prefixes."""
    turns = same = tokens = agreed = 0
    gap = 0.0
    for a, b in zip(plain, spec, strict=True):
        if a.task_id != b.task_id:
            raise ValueError(f"episodes out of order: {a.task_id} vs {b.task_id}")
        for x, y in zip(a.turns, b.turns, strict=False):
            turns += 1
            same += x.ids == y.ids
            n = next((i for i, (u, v) in enumerate(zip(x.ids, y.ids, strict=False)) if u != v),
                     min(len(x.ids), len(y.ids)))  # fmt: skip
            tokens += max(len(x.ids), len(y.ids))
            agreed += n
            if x.logprobs and y.logprobs:
                gap = max([gap, *(abs(u - v) for u, v in zip(x.logprobs[:n], y.logprobs[:n], strict=True))])
    return {"turns": turns, "turns_identical": round(same / max(turns, 1), 4),
            "tokens_before_first_difference": round(agreed / max(tokens, 1), 4), "max_logprob_gap": round(gap, 4)}  # fmt: skip


def spec_engine(args: argparse.Namespace) -> dict[str, Any]:
    """One engine of `spec` (``--engine plain|spec``), in a process of its own: its check against the eager
    model, its two timed runs, and every episode's turns (token ids and log-probs) for the comparison."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fathom.models.loading import resolve_model_dir
    from fathom.rollout import ChatFormat, Sampling, VLLMBackend
    from fathom.rollout.vllm_options import VLLMEngineOptions, merged_kwargs

    path = str(resolve_model_dir(args.model))
    chat = ChatFormat(AutoTokenizer.from_pretrained(path))
    k = args.ngram_speculative_tokens if args.engine == "spec" else 0
    options = VLLMEngineOptions(
        args.async_scheduling, args.max_num_batched_tokens, args.max_num_seqs, ngram_speculative_tokens=k
    )
    started = time.perf_counter()
    backend = VLLMBackend(
        path, gpu_memory_utilization=0.3, max_model_len=8192, dtype="bfloat16", **merged_kwargs({}, options)
    )
    engine_start_s = time.perf_counter() - started
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
    prompts = prompts_for(chat, 8)
    greedy = Sampling(max_new_tokens=32, temperature=0.0, logprobs=True)
    err, agree = eager_check(model, prompts, backend.generate(prompts, greedy))
    eager = {"max_logprob_err": round(err, 4), "greedy_eq_eager_argmax": round(agree, 4)}
    print(args.engine, "against the eager model", json.dumps(eager), flush=True)
    del model
    tasks, config = rlm_tasks(args.tasks), rlm_config(0.0)
    rows = []
    for _ in range(2):
        episodes, row = timed_episodes(backend.llm, chat, config, tasks)
        print(args.engine, json.dumps(row), flush=True)
        rows.append(row)
    turns = [{"task_id": e.task_id, "turns": [[t.ids, t.logprobs] for t in e.turns]} for e in episodes]
    return {"engine": args.engine, "runs": rows, "eager_check": eager, "engine_start_s": round(engine_start_s, 1),
            "options": vars(options), "device": torch.cuda.get_device_name(), "episodes": turns}  # fmt: skip


def episodes_of(saved: list[dict[str, Any]]) -> list[Any]:
    """`spec_engine`'s saved turns as the episodes `turn_agreement` reads."""
    from types import SimpleNamespace as NS

    return [NS(task_id=e["task_id"], turns=[NS(ids=i, logprobs=lp) for i, lp in e["turns"]]) for e in saved]


def spec(args: argparse.Namespace) -> dict[str, Any]:
    """Each engine in a process of its own, one after the other (vLLM's in-process engine keeps global state:
    two in one process is not something vLLM supports), then the two side by side. With ``--parts`` the two
    ``spec-engine`` runs were made already (one call each): compare only."""
    import subprocess
    import tempfile

    folder = args.parts or Path(tempfile.mkdtemp(prefix="fathom-spec-"))
    if not args.parts:
        for name in ("plain", "spec"):
            cmd = [sys.executable, __file__, "spec-engine", "--engine", name, "--model", args.model,
                   "--tasks", str(args.tasks), "--ngram-speculative-tokens", str(args.ngram_speculative_tokens),
                   "--async-scheduling", args.async_scheduling,
                   "--max-num-batched-tokens", str(args.max_num_batched_tokens),
                   "--max-num-seqs", str(args.max_num_seqs), "--out", str(folder / f"{name}.json")]  # fmt: skip
            subprocess.run(cmd, check=True)
    parts = {name: json.loads((folder / f"{name}.json").read_text()) for name in ("plain", "spec")}
    agreement = turn_agreement(*(episodes_of(parts[name]["episodes"]) for name in ("plain", "spec")))
    best = {k: min(v["runs"], key=lambda r: r["wall_s"]) for k, v in parts.items()}
    ratio = best["plain"]["wall_s"] / best["spec"]["wall_s"]
    print(f"spec / plain speed (wall time, best of two): {ratio:.2f}x; agreement {json.dumps(agreement)}")
    return {"spec": {k: v["runs"] for k, v in parts.items()}, "speedup_wall": round(ratio, 2),
            "eager_check": {k: v["eager_check"] for k, v in parts.items()},
            "engine_start_s": {k: v["engine_start_s"] for k, v in parts.items()}, "agreement": agreement,
            "tasks": args.tasks, "ngram_speculative_tokens": args.ngram_speculative_tokens,
            "device": parts["plain"]["device"]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("decode", "engine", "spec", "spec-engine", "levers"))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--async-scheduling", default="auto", help="engine: auto | on | off")
    parser.add_argument("--max-num-batched-tokens", type=int, default=0, help="engine: 0 = vLLM's")
    parser.add_argument("--max-num-seqs", type=int, default=0, help="engine: 0 = vLLM's")
    parser.add_argument(
        "--ngram-speculative-tokens",
        type=int,
        default=4,
        help="spec: tokens proposed a step by n-gram lookup",
    )
    parser.add_argument(
        "--engine", choices=("plain", "spec"), help="spec-engine: which engine this process runs"
    )
    parser.add_argument(
        "--parts", type=Path, help="spec: compare the plain.json / spec.json that spec-engine wrote there"
    )
    parser.add_argument("--runs", type=Path, help="levers: the folder holding the runs")
    parser.add_argument(
        "--logs", type=Path, help="levers: the folder holding the runs' logs (default --runs)"
    )
    parser.add_argument("--lever-args", default="", help="levers: the options the lever runs added")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = {"decode": decode, "engine": engine, "spec": spec, "spec-engine": spec_engine, "levers": levers}[
        args.what
    ](args)
    result["command"] = "python bench/gpu_rollouts.py " + " ".join(sys.argv[1:])
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
