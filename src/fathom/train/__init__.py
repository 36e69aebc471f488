"""Training: SFT warm-start on REPL transcripts and GRPO with the environment inside the rollout loop.

- `config`, `configfile`: every knob as frozen dataclasses; recipe TOML with ``--section.key=value`` overrides.
- `recipe`, `control`: the lab recipe's pure parts (curriculum, Lagrangian token penalty, rank bonus) and
  live steering through a control file.
- `tasksource`: which task each GRPO group gets (curriculum tier, step, slot), and the fixed eval set.
- `rollout_func`: TRL's ``rollout_func`` over the rollout engine, the reward function and behaviour metrics.
- `grpo`, `sft`, `smoke`: the ``fathom grpo`` / ``fathom sft`` / ``fathom smoke`` commands.
- `checkpoint`, `runlog`: atomic checkpoints, pruning, exact resume, export; JSONL metrics and traces.

Heavy imports (torch, transformers, trl) happen inside the modules that need them, never here.
"""
