"""Where the captured decode step's log-probs part from the eager model's, on a GPU (diagnosis, not a test).

On the H200 the captured step of `GraphDecoder` differed from an eager forward by ~2e-3 in log-prob with
tiny-smol in float32, while the same step uncaptured matched to <5e-5. A float32 reordering cannot move a
log-prob that far; TF32 matrix products (10-bit mantissa) can. This prints, for tiny-smol in float32, the
largest |log-prob - eager| of greedy decoding by the uncaptured ("lean") and captured ("graph") decoder,
with the eager reference in full float32 and again with TF32 allowed, so one run says which it is:

    python3 scripts/gpu/graph_numerics.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def main() -> None:
    import torch
    from rollout import max_logprob_error  # bench/rollout.py

    from fathom.models import ModelSpec, load_model
    from fathom.rollout import ChatFormat, HFBackend

    torch.manual_seed(0)
    model, tok = load_model(ModelSpec(name="tiny-smol", dtype="float32", device="cuda"))
    model.eval()
    chat = ChatFormat(tok)
    questions = ["What is 2+2?", "Name a color.", "Write a python loop over a list.", "Capital of France?"]
    prompts = [chat.prompt_ids("You are helpful.", q) for q in questions]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, tiny-smol float32")
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for mode in ("lean", "graph"):
            backend = HFBackend(model, tok, mode=mode, max_cache_len=256, graph_max_new=32)
            error = max_logprob_error(model, backend, prompts, 32)
            print(f"allow_tf32={tf32!s:5} {mode:>5}: max |log-prob - eager| = {error:.2e}")


if __name__ == "__main__":
    main()
