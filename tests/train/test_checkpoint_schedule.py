"""Checkpoint schedule, atomic commit, pruning, and JSONL truncation on resume."""

from __future__ import annotations

import json

from fathom.train import checkpoint
from fathom.train.config import CheckpointConfig
from fathom.train.runlog import JsonlWriter, read_jsonl, truncate_after


def test_schedule_is_geometric_plus_every_n_plus_the_last_step():
    cfg = CheckpointConfig(save_every=10, geometric_first=1, geometric_factor=2.0)
    saved = [s for s in range(1, 41) if checkpoint.should_save(s, 37, cfg)]
    assert saved == [1, 2, 4, 8, 10, 16, 20, 30, 32, 37, 38, 39, 40]  # >= max_steps always saves
    assert checkpoint.geometric_steps(3, 1.5, 20) == {3, 4, 7, 10, 15}  # rounded 3, 4.5, 6.75, 10.1, 15.2
    off = CheckpointConfig(geometric=False, save_every=0)
    assert [s for s in range(1, 10) if checkpoint.should_save(s, 9, off)] == [9]


def test_commit_is_atomic_and_pruning_keeps_first_and_newest(tmp_path):
    for step in (1, 2, 4, 8, 16):
        final = tmp_path / f"checkpoint-{step}"
        staging = checkpoint.staging_dir(final)
        staging.mkdir()
        (staging / "weights").write_text(str(step))
        assert not final.exists()  # invisible until committed
        checkpoint.commit(staging, final)
        assert not staging.exists() and (final / "weights").read_text() == str(step)
    (tmp_path / ".tmp-checkpoint-32").mkdir()  # what a SIGKILL during a save leaves
    assert [s for s, _ in checkpoint.checkpoints(tmp_path)] == [1, 2, 4, 8, 16]
    removed = checkpoint.prune(tmp_path, keep_last=2)
    assert sorted(p.name for p in removed) == ["checkpoint-2", "checkpoint-4"]
    assert [s for s, _ in checkpoint.checkpoints(tmp_path)] == [1, 8, 16]
    assert checkpoint.latest(tmp_path).name == "checkpoint-16"
    checkpoint.clean_stale(tmp_path)
    assert not (tmp_path / ".tmp-checkpoint-32").exists()


def test_truncate_after_drops_later_steps_and_a_torn_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    writer = JsonlWriter(path)
    for step in range(1, 6):
        writer.write({"step": step, "loss": step / 10, "nan": float("nan")})
    writer.close()
    with path.open("a") as f:
        f.write('{"step": 6, "lo')  # SIGKILL mid-write
    assert truncate_after(path, 3) == 3
    rows = read_jsonl(path)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[0]["nan"] is None
    assert json.loads(path.read_text().splitlines()[-1])["loss"] == 0.3
