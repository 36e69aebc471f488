"""What `scripts/gpu/proof.sh` resolves from its environment: the GRPO runs it trains side by side, the second
run's learning rate, the teacher's slips, the evaluations' repetition penalty and readers. Only the `settings`
stage runs (no data, model or training)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def settings(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts/gpu/proof.sh"), "settings"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PROOF_DIR": str(tmp_path), "PROOF_DEVICE": "cuda", **env},
    )


def test_lr_pair_trains_the_second_run_at_2_5x_unless_given(tmp_path):
    done = settings(tmp_path, PROOF_GRPO_RUNS="lr-pair", GRPO_LR="2e-5", PROOF_SFT_TEACHER_SLIPS="0.15")
    assert done.returncode == 0, done.stderr
    line = (tmp_path / "progress.log").read_text()
    assert "runs=lr-pair" in line and "lr=2e-5 lr_b=5e-05" in line and "teacher_slips=0.15" in line
    assert "gpu_share=0.36 " in line  # two runs share the GPU: each keeps the both-runs share
    done = settings(tmp_path / "b", PROOF_GRPO_RUNS="lr-pair", GRPO_LR="2e-5", GRPO_LR_B="1e-4")
    assert "lr_b=1e-4" in (tmp_path / "b" / "progress.log").read_text()


def test_one_trained_run_alone_gets_a_larger_memory_share(tmp_path):
    done = settings(tmp_path, PROOF_GRPO_RUNS="trained")
    assert done.returncode == 0, done.stderr
    assert "gpu_share=0.54 " in (tmp_path / "progress.log").read_text()


@pytest.mark.parametrize("runs", ["masked", "lr_pair", "trained "])
def test_an_unknown_choice_of_runs_is_refused(tmp_path, runs):
    done = settings(tmp_path, PROOF_GRPO_RUNS=runs)
    assert done.returncode == 2 and "PROOF_GRPO_RUNS must be both, lr-pair, trained or none" in done.stderr


def test_the_evaluations_repetition_penalty_is_logged(tmp_path):
    done = settings(tmp_path, PROOF_EVAL_REPETITION_PENALTY="1.1")
    assert done.returncode == 0, done.stderr
    assert "eval_repetition_penalty=1.1 " in (tmp_path / "progress.log").read_text()
    settings(tmp_path / "off")
    assert "eval_repetition_penalty=1.0 " in (tmp_path / "off" / "progress.log").read_text()


def test_a_second_sft_evaluation_with_a_repetition_penalty_is_logged_when_asked(tmp_path):
    done = settings(tmp_path, PROOF_SFT_EVAL_REPETITION_PENALTY="1.1")
    assert done.returncode == 0, done.stderr
    line = (tmp_path / "progress.log").read_text()
    assert "eval_repetition_penalty=1.0 sft_eval_repetition_penalty=1.1;" in line
    settings(tmp_path / "off")
    assert "sft_eval_repetition_penalty=none;" in (tmp_path / "off" / "progress.log").read_text()


def test_sft_tasks_are_generated_distinct_unless_the_pool_is_asked_for(tmp_path):
    settings(tmp_path, PROOF_SFT_TASKS="1024")
    assert "tasks=1024 (generated)" in (tmp_path / "progress.log").read_text()
    settings(tmp_path / "pool", PROOF_SFT_TASK_SOURCE="pool")
    assert "tasks=512 (pool)" in (tmp_path / "pool" / "progress.log").read_text()
    done = settings(tmp_path / "bad", PROOF_SFT_TASK_SOURCE="fresh")
    assert done.returncode == 2 and "PROOF_SFT_TASK_SOURCE must be generated or pool" in done.stderr


def test_sft_min_epochs_is_passed_on_and_logged(tmp_path):
    settings(tmp_path, PROOF_SFT_MIN_EPOCHS="1")
    assert "entropy_floor=0.03 min_epochs=1 " in (tmp_path / "progress.log").read_text()
    settings(tmp_path / "default")
    assert "min_epochs=0 " in (tmp_path / "default" / "progress.log").read_text()


def test_the_reader_rows_per_transcript_are_logged_and_default_to_one(tmp_path):
    done = settings(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "reader_ratio=1.0 reader_batches=mixed;" in (tmp_path / "progress.log").read_text()
    settings(tmp_path / "half", PROOF_SFT_READER_RATIO="0.5", PROOF_SFT_READER_BATCHES="own")
    assert "reader_ratio=0.5 reader_batches=own;" in (tmp_path / "half" / "progress.log").read_text()
    bad = settings(tmp_path / "bad", PROOF_SFT_READER_BATCHES="apart")
    assert bad.returncode == 2 and "PROOF_SFT_READER_BATCHES must be mixed or own" in bad.stderr


def test_the_students_reader_is_shown_4096_tokens_when_qwen_and_the_recipes_2048_otherwise(tmp_path):
    done = settings(tmp_path, PROOF_MODEL="qwen2.5-coder-0.5b")
    assert done.returncode == 0, done.stderr
    assert "sub_input=4096;" in (tmp_path / "progress.log").read_text()
    settings(tmp_path / "smol")
    assert "sub_input=2048;" in (tmp_path / "smol" / "progress.log").read_text()
    settings(tmp_path / "set", PROOF_MODEL="qwen2.5-coder-0.5b", PROOF_SUB_INPUT_TOKENS="3072")
    assert "sub_input=3072;" in (tmp_path / "set" / "progress.log").read_text()


@pytest.mark.parametrize(
    ("var", "logged", "default", "other", "refusal"),
    [  # the baselines run unless an earlier run's stand in; the teacher with the untrained reader when asked
        ("PROOF_BASELINES", "baselines", "run", "skip", "PROOF_BASELINES must be run or skip"),
        (
            "PROOF_TEACHER_READER",
            "teacher_reader",
            "none",
            "base",
            "PROOF_TEACHER_READER must be none or base",
        ),
    ],
)
def test_a_stage_beside_sft_is_asked_for_logged_and_checked(tmp_path, var, logged, default, other, refusal):
    done = settings(tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{logged}={default};" in (tmp_path / "progress.log").read_text()
    done = settings(tmp_path / "other", **{var: other})
    assert done.returncode == 0, done.stderr
    assert f"{logged}={other};" in (tmp_path / "other" / "progress.log").read_text()
    done = settings(tmp_path / "bad", **{var: "trained"})
    assert done.returncode == 2 and refusal in done.stderr


def test_the_1_5b_student_trains_half_the_sequences_a_micro_batch_at_a_lower_rate(tmp_path):
    done = settings(tmp_path, PROOF_MODEL="qwen2.5-coder-1.5b")
    assert done.returncode == 0, done.stderr
    line = (tmp_path / "progress.log").read_text()
    assert "model=qwen2.5-coder-1.5b " in line and "sub_input=4096;" in line
    assert "batch=2 x4 lr=3e-5 " in line and "micro=1 accum=16 lr=1e-5 " in line
    settings(tmp_path / "half", PROOF_MODEL="qwen2.5-coder-0.5b")
    line = (tmp_path / "half" / "progress.log").read_text()
    assert "batch=4 x2 lr=5e-5 " in line and "micro=2 accum=8 lr=2e-5 " in line


def test_a_lora_sft_learns_at_ten_times_the_full_fine_tunes_rate_unless_given(tmp_path):
    done = settings(tmp_path, PROOF_MODEL="qwen2.5-coder-1.5b", PROOF_SFT_LORA="1")
    assert done.returncode == 0, done.stderr
    line = (tmp_path / "progress.log").read_text()
    assert "lora=1 (r=64) " in line and "batch=2 x4 lr=0.0003 " in line
    assert "micro=1 accum=16 lr=1e-5 " in line  # GRPO's rate is not the adapter's SFT rate
    done = settings(
        tmp_path / "given", PROOF_MODEL="qwen2.5-coder-1.5b", PROOF_SFT_LORA="1", PROOF_SFT_LR="1e-4"
    )
    assert done.returncode == 0, done.stderr
    assert "batch=2 x4 lr=1e-4 " in (tmp_path / "given" / "progress.log").read_text()


def test_the_untrained_reader_evaluations_are_asked_for_and_logged(tmp_path):
    done = settings(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "eval_reader=own;" in (tmp_path / "progress.log").read_text()  # by default, its own reader only
    done = settings(tmp_path / "b", PROOF_EVAL_READER="both")
    assert done.returncode == 0, done.stderr
    assert "eval_reader=both;" in (tmp_path / "b" / "progress.log").read_text()
    done = settings(tmp_path / "c", PROOF_EVAL_READER="base")
    assert done.returncode == 2 and "PROOF_EVAL_READER must be own, both, trained or all" in done.stderr


def test_a_reader_trained_apart_is_asked_for_with_its_settings_and_only_without_grpo(tmp_path):
    done = settings(tmp_path, PROOF_EVAL_READER="trained", PROOF_GRPO_RUNS="none")
    assert done.returncode == 0, done.stderr
    assert (
        "eval_reader=trained (reader sft: ratio 1.5 x1 lr 3e-4); grpo_reader=own;"
        in (tmp_path / "progress.log").read_text()
    )
    done = settings(
        tmp_path / "set",
        PROOF_EVAL_READER="trained",
        PROOF_GRPO_RUNS="none",
        PROOF_READER_SFT_RATIO="2",
        PROOF_READER_SFT_EPOCHS="1.5",
        PROOF_READER_SFT_LR="1e-4",
    )
    assert done.returncode == 0, done.stderr
    assert (
        "eval_reader=trained (reader sft: ratio 2 x1.5 lr 1e-4);"
        in (tmp_path / "set" / "progress.log").read_text()
    )
    done = settings(tmp_path / "all", PROOF_EVAL_READER="all", PROOF_GRPO_RUNS="none")
    assert done.returncode == 0, done.stderr
    assert (
        "eval_reader=all (reader sft: ratio 1.5 x1 lr 3e-4);"
        in (tmp_path / "all" / "progress.log").read_text()
    )
    done = settings(tmp_path / "grpo", PROOF_EVAL_READER="trained")  # GRPO runs by default
    assert done.returncode == 2 and "PROOF_EVAL_READER=trained runs with PROOF_GRPO_RUNS=none" in done.stderr
    assert "or PROOF_GRPO_READER=trained" in done.stderr
    done = settings(
        tmp_path / "base",
        PROOF_EVAL_READER="all",
        PROOF_GRPO_RUNS="none",
        PROOF_GRPO_READER="base",
        PROOF_SFT_LORA="1",
    )
    assert done.returncode == 2 and "PROOF_EVAL_READER=all does not apply" in done.stderr


def test_grpo_with_the_untrained_reader_needs_a_lora_sft_and_evaluates_both_readers(tmp_path):
    done = settings(tmp_path, PROOF_GRPO_READER="base", PROOF_GRPO_RUNS="trained")
    assert done.returncode == 2 and "needs PROOF_SFT_LORA=1" in done.stderr
    done = settings(tmp_path / "both", PROOF_GRPO_READER="base", PROOF_SFT_LORA="1")
    assert done.returncode == 2 and "PROOF_GRPO_RUNS=both (trained vs masked) does not apply" in done.stderr
    done = settings(tmp_path / "ok", PROOF_GRPO_READER="base", PROOF_SFT_LORA="1", PROOF_GRPO_RUNS="trained")
    assert done.returncode == 0, done.stderr
    line = (tmp_path / "ok" / "progress.log").read_text()
    assert "eval_reader=both; grpo_reader=base;" in line and "lora=1 " in line
    done = settings(tmp_path / "bad", PROOF_GRPO_READER="teacher")
    assert done.returncode == 2 and "PROOF_GRPO_READER must be own, base or trained" in done.stderr


def test_grpo_with_the_reader_trained_apart_runs_one_grpo_run_and_evaluates_with_that_reader(tmp_path):
    done = settings(tmp_path, PROOF_GRPO_READER="trained", PROOF_GRPO_RUNS="trained")
    assert done.returncode == 0, done.stderr
    line = (tmp_path / "progress.log").read_text()
    assert "eval_reader=trained (reader sft: ratio 1.5 x1 lr 3e-4); grpo_reader=trained;" in line
    for runs in ("both", "lr-pair", "none"):
        done = settings(tmp_path / runs, PROOF_GRPO_READER="trained", PROOF_GRPO_RUNS=runs)
        assert done.returncode == 2 and "PROOF_GRPO_READER=trained runs one GRPO run" in done.stderr
    done = settings(
        tmp_path / "all", PROOF_GRPO_READER="trained", PROOF_GRPO_RUNS="trained", PROOF_EVAL_READER="all"
    )
    assert done.returncode == 0, done.stderr
    assert "eval_reader=all (reader sft" in (tmp_path / "all" / "progress.log").read_text()
