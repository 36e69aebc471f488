"""bench/reader_share.py: the reader rows' share of SFT's loss tokens, from the rows SFT would build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_shares_come_from_the_rows_sft_would_train():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench/reader_share.py"), "--tasks", "8", "--ratio", "2"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300, check=True,
    )  # fmt: skip
    out = json.loads(done.stdout[done.stdout.index("{") :])
    kinds = out["reply_tokens_by_kind"]
    assert out["reader_rows"] == sum(k["rows"] for k in kinds.values())
    assert out["reader_rows"] <= 2 * out["transcripts_trained"]
    assert 0 < out["answer_rows_share_of_loss_tokens"] <= out["reader_share_of_loss_tokens"] < 0.5
    assert out["loss_tokens_per_transcript"] > max(k["mean"] for k in kinds.values())
