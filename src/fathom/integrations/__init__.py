"""FATHOM episodes inside trainers we did not write.

- `fathom.integrations.trl`: an environment class for TRL's `GRPOTrainer(environment_factory=...)`,
  in-process or against `fathom serve`, and the dataset builder for it.

Submodules are imported on demand: each pulls in its own trainer's dependencies. This package holds no
training loop of its own (FATHOM's is `fathom grpo`).
"""
