"""Carrying a GPU proof run across sessions: scripts/gpu/carry_pieces.sh, `proof.sh bring` / `restore` and
scripts/gpu/prepare_carry_back.sh on a run directory laid out as the pipeline leaves it.

Pieces and manifests round trip byte for byte; no bring call returns more than a device call may; the settings
packed are the run's own, not the bring call's; a missing or damaged piece, another pack's manifest and a
restore with other settings are refused before anything is unpacked. Not covered here: training and the data
rebuild that `restore` runs once all pieces are in (the CPU rehearsal in bench/RESULTS.md runs those).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIECES = ROOT / "scripts/gpu/carry_pieces.sh"
CALL_BYTES = 20_000  # what one bring call may return, here: the manifest and 3 pieces of 5,000 bytes


def run(
    *args: object, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def flip(path: Path, at: int = 5) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def split(tmp_path: Path, size: int = 100_001, piece: int = 30_000) -> tuple[bytes, Path]:
    data = blob(size)
    (tmp_path / "f.bin").write_bytes(data)
    done = run(PIECES, "split", tmp_path / "f.bin", piece, tmp_path / "p")
    assert done.returncode == 0, done.stderr
    return data, tmp_path / "p"


def test_split_writes_pieces_and_a_manifest_that_join_reverses(tmp_path):
    data, pieces = split(tmp_path)
    lines = (pieces / "manifest.sha256").read_text().splitlines()
    assert lines[0] == f"{hashlib.sha256(data).hexdigest()}  f.bin"
    names = [line.split()[1] for line in lines[1:]]
    assert names == ["f.bin.000", "f.bin.001", "f.bin.002", "f.bin.003"]
    assert [(pieces / n).stat().st_size for n in names] == [30_000, 30_000, 30_000, 10_001]
    for line in lines[1:]:
        digest, name = line.split()
        assert hashlib.sha256((pieces / name).read_bytes()).hexdigest() == digest
    done = run(PIECES, "join", pieces, tmp_path / "out.bin")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.bin").read_bytes() == data


def test_join_refuses_a_damaged_piece_and_leaves_no_output(tmp_path):
    _, pieces = split(tmp_path)
    flip(pieces / "f.bin.001")
    done = run(PIECES, "join", pieces, tmp_path / "out.bin")
    assert done.returncode == 1
    assert "damaged" in done.stderr and "f.bin.001" in done.stderr
    assert not (tmp_path / "out.bin").exists() and not (tmp_path / "out.bin.tmp").exists()


def test_join_names_the_missing_piece(tmp_path):
    _, pieces = split(tmp_path)
    (pieces / "f.bin.002").unlink()
    assert run(PIECES, "missing", pieces).stdout.split() == ["f.bin.002"]
    done = run(PIECES, "join", pieces, tmp_path / "out.bin")
    assert done.returncode == 1 and "lacks 1 of 4 pieces: f.bin.002" in done.stderr
    assert not (tmp_path / "out.bin").exists()


def test_split_refuses_a_size_that_is_not_a_positive_number(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"abc")
    done = run(PIECES, "split", tmp_path / "f.bin", "0", tmp_path / "p")
    assert done.returncode == 1 and "BYTES must be a positive whole number" in done.stderr


def test_cap_leaves_room_for_the_files_every_call_sends(tmp_path):
    """A call's payload is 64 MiB less the tree that travels with it: tracked and untracked files, not ignored ones."""
    repo = tmp_path / "repo"
    (repo / "scripts/gpu").mkdir(parents=True)
    shutil.copy(PIECES, repo / "scripts/gpu/carry_pieces.sh")
    (repo / ".gitignore").write_text("/.va/\n")
    (repo / "tracked.bin").write_bytes(blob(300_000))
    (repo / ".va").mkdir()
    (repo / ".va/vpart_aa").write_bytes(blob(5_000_000))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", ".gitignore", "tracked.bin", "scripts"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "t"], check=True)

    def cap() -> int:
        done = run(repo / "scripts/gpu/carry_pieces.sh", "cap", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    sent = 300_000 + len("/.va/\n") + PIECES.stat().st_size
    assert cap() == 64 * 2**20 - 2 * 2**20 - sent
    (repo / "notes.txt").write_bytes(blob(1_000))  # untracked, not ignored: it travels too
    assert cap() == 64 * 2**20 - 2 * 2**20 - sent - 1_000


def proof_env(run_dir: Path, out: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROOF_")}
    env.update(PROOF_SCALE="tiny", PROOF_MODEL="tiny-smol", PROOF_DEVICE="cpu", PROOF_DIR=str(run_dir))
    env.update(PROOF_SFT_LORA="1", PROOF_BRING_PIECE="5000", PROOF_BRING_CALL_BYTES=str(CALL_BYTES))
    if out is not None:
        env["OUT"] = str(out)
    env.update(extra)
    return env


def fake_run(run_dir: Path, sft_lora: bool = True, **settings: str) -> bytes:
    """A run as the pipeline leaves it after GRPO, begun with `settings` (PROOF_* over proof_env's); returns the
    newest checkpoint's adapter bytes."""
    for stage in ("data", "model", "baselines", "sft", "sft_eval", "grpo"):
        (run_dir / "done").mkdir(parents=True, exist_ok=True)
        (run_dir / "done" / stage).touch()
    (run_dir / "data").mkdir()
    for name in ("train", "eval", "heldout", "heldout_unseen"):
        (run_dir / "data" / f"{name}.jsonl").write_text(json.dumps({"id": name}) + "\n")
    (run_dir / "keep").mkdir()
    (run_dir / "keep" / "sft_summary.json").write_text("{}\n")
    (run_dir / "progress.log").write_text("[00:00:00] stage grpo done\n")
    (run_dir / "sft").mkdir()
    (run_dir / "sft" / "summary.json").write_text("{}\n")
    (run_dir / "sft" / "metrics.jsonl").write_text("{}\n")
    sft_final = run_dir / "sft" / "final" / ("adapter" if sft_lora else "model")
    sft_final.mkdir(parents=True)
    (sft_final / "config.json").write_text("{}\n")
    (run_dir / "eval" / "rlm-sft").mkdir(parents=True)
    (run_dir / "eval" / "rlm-sft" / "summary.json").write_text("{}\n")
    adapter = b""
    for step in (10, 20):
        ckpt = run_dir / "grpo" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        adapter = blob(50_000, seed=step)
        (ckpt / "adapter_model.safetensors").write_bytes(adapter)
        (ckpt / "optimizer.pt").write_bytes(blob(90_000, seed=step + 1))
        (ckpt / "fathom_state.json").write_text(json.dumps({"step": step}))
    (run_dir / "grpo" / "metrics.jsonl").write_text('{"step": 1}\n')
    began = run(ROOT / "scripts/gpu/proof.sh", "settings", env=proof_env(run_dir, **settings))
    assert began.returncode == 0, began.stderr
    return adapter


def bring_all(run_dir: Path, tmp_path: Path) -> list[Path]:
    """`proof.sh bring`, then `bring N` until every piece is out; the calls' output folders."""
    outs, call = [], 1
    while True:
        out = tmp_path / f"out{call}"
        out.mkdir()
        done = run(
            ROOT / "scripts/gpu/proof.sh", "bring", *([call] if call > 1 else []), env=proof_env(run_dir, out)
        )
        assert done.returncode == 0, done.stderr
        files = sorted(p.name for p in out.iterdir())
        assert "manifest.sha256" in files and 2 <= len(files) <= 8
        assert sum(p.stat().st_size for p in out.iterdir()) <= CALL_BYTES
        outs.append(out)
        if "next: " not in done.stdout:
            return outs
        call += 1


def pack_members(carry_dirs: list[Path], tmp_path: Path) -> tarfile.TarFile:
    joined = tmp_path / "joined"
    joined.mkdir()
    for d in carry_dirs:
        for f in d.iterdir():
            shutil.copy(f, joined / f.name)
    done = run(PIECES, "join", joined, tmp_path / "carry.tgz")
    assert done.returncode == 0, done.stderr
    return tarfile.open(fileobj=io.BytesIO((tmp_path / "carry.tgz").read_bytes()), mode="r:gz")


def test_bring_packs_the_newest_checkpoint_without_the_optimizer_and_carry_back_restores_it(tmp_path):
    run_dir = tmp_path / "run"
    adapter = fake_run(run_dir)
    outs = bring_all(run_dir, tmp_path)
    assert len(outs) >= 2  # more than 3 pieces of 5,000 bytes: the second call brings the rest
    tree = tmp_path / "tree"  # a working tree: the carry folders land at its root, where restore looks
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    done = run(
        ROOT / "scripts/gpu/prepare_carry_back.sh",
        *outs,
        env={**os.environ, "CARRY_OUT": str(tree), "CAP": "20000"},
    )
    assert done.returncode == 0, done.stderr
    carry_dirs = sorted(tree.glob(".cb[0-9]*"), key=lambda p: int(p.name[3:]))
    assert len(carry_dirs) >= 2  # parts of 20,000 bytes: restore must wait for all of them
    plan = (tree / ".cbplan").read_text()
    assert plan.rstrip().endswith(
        f'carry [".cb{len(carry_dirs)}"]:  bash scripts/gpu/proof.sh restore && bash scripts/gpu/proof.sh start'
    )
    assert "#   sft_lora=1" in plan

    pack = pack_members(carry_dirs, tmp_path)
    names = set(pack.getnames())
    assert "grpo/checkpoint-20/adapter_model.safetensors" in names and "grpo/metrics.jsonl" in names
    assert not any("optimizer.pt" in n or "checkpoint-10" in n for n in names)
    assert {"keep/progress.log", "sft/summary.json", "eval/rlm-sft/summary.json"} <= names
    assert pack.extractfile("grpo/checkpoint-20/adapter_model.safetensors").read() == adapter
    meta = {
        n: pack.extractfile(f"carry-meta/{n}").read().decode() for n in ("settings", "done", "checkpoints")
    }
    assert "sft_lora=1" in meta["settings"] and "sft_lora_r=64" in meta["settings"]
    assert meta["checkpoints"].split() == ["grpo/checkpoint-20"]
    assert "sft_eval" in meta["done"].split()
    sums = pack.extractfile("carry-meta/data.sha256").read().decode()
    expect = hashlib.sha256((run_dir / "data" / "heldout.jsonl").read_bytes()).hexdigest()
    assert f"{expect}  ./heldout.jsonl" in sums

    # restore, one call's folder at a time: the first waits for the rest and unpacks nothing
    fresh = tmp_path / "run2"
    parked = tree / "parked"
    parked.mkdir()
    for d in carry_dirs[1:]:
        d.rename(parked / d.name)
    done = run(tree / "scripts/gpu/proof.sh", "restore", env=proof_env(fresh), cwd=tree)
    assert done.returncode == 0, done.stderr
    assert "pieces still to come" in done.stdout and not (fresh / "grpo").exists()
    for d in carry_dirs[1:]:
        (parked / d.name).rename(d)
    other = run(
        tree / "scripts/gpu/proof.sh", "restore", env=proof_env(fresh, PROOF_SFT_LORA_R="32"), cwd=tree
    )
    assert other.returncode == 1 and "not the carried run's" in other.stderr
    assert "sft_lora_r=32" in other.stdout and not (fresh / "grpo").exists()
    flip(next(tree.glob(".cb*/carry.tgz.001")))  # restore takes each call's pieces again
    damaged = run(tree / "scripts/gpu/proof.sh", "restore", env=proof_env(fresh), cwd=tree)
    assert damaged.returncode == 1 and "damaged" in damaged.stderr and "carry.tgz.001" in damaged.stderr


def test_prepare_carry_back_refuses_pieces_of_two_packs(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for d, seed in ((one, 1), (two, 2)):
        d.mkdir()
        (d / "carry.tgz").write_bytes(blob(1000, seed))
        assert run(PIECES, "split", d / "carry.tgz", 600, d).returncode == 0
    done = run(
        ROOT / "scripts/gpu/prepare_carry_back.sh",
        one,
        two,
        env={**os.environ, "CARRY_OUT": str(tmp_path / "tree")},
    )
    assert done.returncode == 1 and "another pack" in done.stderr
    assert not (tmp_path / "tree").exists()


def test_bring_refuses_a_full_fine_tune(tmp_path):
    lora, full = tmp_path / "lora", tmp_path / "full"
    fake_run(lora, PROOF_SFT_LORA="0")  # the run began without LoRA, whatever the bring call says
    fake_run(full, sft_lora=False)  # began with LoRA settings, but SFT was not
    out = tmp_path / "out"
    out.mkdir()
    done = run(ROOT / "scripts/gpu/proof.sh", "bring", env=proof_env(lora, out))
    assert done.returncode == 1 and "bring needs a run with PROOF_SFT_LORA=1" in done.stderr
    done = run(ROOT / "scripts/gpu/proof.sh", "bring", env=proof_env(full, out))
    assert done.returncode == 1 and "this run's SFT was a full fine-tune" in done.stderr
    assert list(out.iterdir()) == []


def test_bring_packs_the_settings_the_run_began_with_not_the_bring_calls(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir, PROOF_SFT_LORA_R="32", PROOF_SFT_LR="1e-4")
    out = tmp_path / "out"
    out.mkdir()
    done = run(ROOT / "scripts/gpu/proof.sh", "bring", env=proof_env(run_dir, out))  # the defaults: r 64
    assert done.returncode == 0, done.stderr
    with tarfile.open(run_dir / "bring" / "carry.tgz") as pack:
        packed = pack.extractfile("carry-meta/settings").read().decode()
    assert "sft_lora_r=32" in packed.splitlines() and " lr 1e-4 " in packed
    assert packed == (run_dir / "settings.record").read_text()


def test_a_run_directory_refuses_to_begin_again_with_other_settings(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir, PROOF_SFT_LORA_R="32")
    record = (run_dir / "settings.record").read_text()
    again = run(ROOT / "scripts/gpu/proof.sh", "settings", env=proof_env(run_dir, PROOF_SFT_LORA_R="32"))
    assert again.returncode == 0, again.stderr
    other = run(ROOT / "scripts/gpu/proof.sh", "settings", env=proof_env(run_dir))
    assert other.returncode == 1 and "ran with other settings" in other.stderr
    assert "sft_lora_r=64" in other.stderr and (run_dir / "settings.record").read_text() == record
    # GRPO has run here (fake_run's checkpoints): another GRPO rate is refused as well
    other_grpo = run(
        ROOT / "scripts/gpu/proof.sh",
        "settings",
        env=proof_env(run_dir, PROOF_SFT_LORA_R="32", GRPO_LR="4e-5"),
    )
    assert other_grpo.returncode == 1 and "lr 4e-5" in other_grpo.stderr
    assert (run_dir / "settings.record").read_text() == record


def test_bring_packs_the_sft_adapter_where_no_grpo_ran_and_restore_puts_it_where_grpo_starts(tmp_path):
    run_dir = tmp_path / "run"
    fake_run(run_dir)
    shutil.rmtree(run_dir / "grpo")  # PROOF_GRPO_RUNS=none: SFT and its evaluation only
    (run_dir / "done" / "grpo").unlink()
    adapter = blob(40_000, seed=7)
    (run_dir / "sft" / "final" / "adapter" / "adapter_model.safetensors").write_bytes(adapter)
    outs = bring_all(run_dir, tmp_path)
    pack = pack_members(outs, tmp_path)
    assert pack.extractfile("sft/final/adapter/adapter_model.safetensors").read() == adapter
    assert pack.extractfile("carry-meta/checkpoints").read().decode().split() == ["sft/final/adapter"]
    assert not any(n.startswith("grpo") for n in pack.getnames())

    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "scripts", tree / "scripts")
    done = run(ROOT / "scripts/gpu/prepare_carry_back.sh", *outs, env={**os.environ, "CARRY_OUT": str(tree)})
    assert done.returncode == 0, done.stderr
    fresh = tmp_path / "run2"
    # restore rebuilds the data (`proof.sh data`) once every piece is in: here a stand-in writes the run's files
    fathom = tmp_path / "bin" / "python"
    fathom.parent.mkdir()
    fathom.write_text(
        f'#!/usr/bin/env bash\nmkdir -p "{fresh}/data" && cp "{run_dir}"/data/*.jsonl "{fresh}/data/"\n'
    )
    fathom.chmod(0o755)
    # what made the adapter must match; the GRPO that is yet to start from it may differ (here its rate)
    other_sft = run(
        tree / "scripts/gpu/proof.sh",
        "restore",
        env=proof_env(tmp_path / "run3", PROOF_SFT_LORA_R="32"),
        cwd=tree,
    )
    assert other_sft.returncode == 1 and "not the carried run's" in other_sft.stderr
    env = proof_env(fresh, PY=str(fathom), GRPO_LR="3e-5")
    done = run(tree / "scripts/gpu/proof.sh", "restore", env=env, cwd=tree)
    assert done.returncode == 0, done.stderr
    assert (fresh / "sft" / "final" / "adapter" / "adapter_model.safetensors").read_bytes() == adapter
    assert {p.name for p in (fresh / "done").iterdir()} == {"data", "baselines", "sft", "sft_eval"}
    record = (fresh / "settings.record").read_text()
    assert "lr 3e-5 seed" in record and "sft_lora_r=64" in record  # the GRPO to come is recorded as asked
    # until a GRPO stage begins, `start` may still change the GRPO settings (the rehearsal's trap: restore
    # without them, then start with them); the SFT settings stay bound
    later = run(
        tree / "scripts/gpu/proof.sh", "settings", env={**env, "GRPO_ARGS": "--checkpoint.save_every=1"}
    )
    assert later.returncode == 0, later.stderr
    assert "grpo_args=--checkpoint.save_every=1" in (fresh / "settings.record").read_text().splitlines()
    assert "no GRPO has begun here" in (fresh / "progress.log").read_text()
    other_sft = run(tree / "scripts/gpu/proof.sh", "settings", env={**env, "PROOF_SFT_LORA_R": "32"})
    assert other_sft.returncode == 1 and "ran with other settings" in other_sft.stderr
    # once GRPO has begun (its metrics exist), its settings are bound too
    (fresh / "grpo").mkdir()
    (fresh / "grpo" / "metrics.jsonl").write_text('{"step": 1}\n')
    begun = run(tree / "scripts/gpu/proof.sh", "settings", env={**env, "GRPO_LR": "4e-5"})
    assert begun.returncode == 1 and "ran with other settings" in begun.stderr
    assert "lr 3e-5 seed" in (fresh / "settings.record").read_text()
