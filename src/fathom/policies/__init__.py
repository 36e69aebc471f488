"""Every policy that is not a trained model, and the readers that answer their `llm()` calls.

- `expert`: the scripted expert, one script per task family (the upper bound; it knows the formats).
- `teacher`: a scripted policy that knows only the conversation (the question and what it printed);
  the default source of SFT transcripts. `grounding` checks that its code uses only what it has seen.
- `scripted`: `ScriptedBackend` (a Python function of the conversation as a `Backend`), `expert_backend`.
- `readers`: the scripted sub-LMs (`expert_reader`, `keyword_reader`, `teacher_reader`).
- `freeform`: the demo's expert for pasted questions no family knows.
- `endpoint`: a teacher model behind an OpenAI-compatible chat endpoint (`sft.source = "openai"`).

The direct baseline (a model answering from its window) lives with the rollout code (`fathom.rollout.direct`).
Import the submodules; this package exports nothing itself, so importing one policy does not load all.
"""
