#!/usr/bin/env bash
# Issue #9: GRPO with the environment in the rollout loop on several GPUs of one host through accelerate (DDP,
# then FSDP2), against one GPU with the same global batch; and what is left behind when a rank dies.
#
#   scripts/gpu/multigpu.sh STAGE [STAGE...]       stages: single ddp fsdp kill compare (or: all)
#
#   single   one GPU, `fathom grpo` (no launcher): the reference, made with this script's time budget
#   ddp      accelerate launch, configs/accelerate/ddp.yaml, MG_PROCS (2) processes
#   fsdp     accelerate launch, configs/accelerate/fsdp.yaml (FSDP2): lockstep generation, plain HF generate
#   kill     a DDP run killed while its rollouts are in flight: SIGKILL rank 1, then the launcher itself
#            (bench/rank_death.py: the launcher must exit non-zero in bounded time, and no process of the run
#            -- rank, bwrap sandbox, jailed REPL worker -- may be left); PASS/FAIL
#   compare  bench/multigpu.py over the runs made so far (every training stage also ends with it)
#
# Same run everywhere: the settings are the single-GPU run's own resolved config (MG_REF_CONFIG, by default
# the one `scripts/gpu/proof.sh grpo` wrote: $PROOF_DIR/grpo/config.toml), overriding only the run dir, the
# time budget and the batch geometry: per_device_train_batch_size stays, gradient_accumulation_steps is divided
# by the process count, so the global batch (rollouts per optimizer step) and the micro-batch are the same.
# Same seed, tasks (a step's tasks do not depend on the process count), SFT init, LoRA, bf16, rollout budget.
# Each training stage stops itself after MG_MINUTES of training (run.max_minutes: checkpoint, export); running
# it again resumes and adds steps. Small results go back in $OUT as one archive.
#
# GPU machine (after scripts/gpu/stage_smollm2_part{1,2}.sh and `proof.sh data sft grpo`), one device call each:
#   source scripts/gpu/stage_smollm2_part2.sh && scripts/gpu/multigpu.sh ddp       (kind nvidia-h200-x2)
#
# Rehearsal on a CPU (gloo; FSDP forced past accelerate's CPU fallback by tests/train/cpu_fsdp.py): the tiny
# model with a varied reward so the loss is not 0 (~3 min for all), or MG_REF_CONFIG=<a CPU proof.sh run's
# grpo/config.toml> for the GPU's code path (reference config, geometry, `-m fathom grpo`):
#   MULTI_DEVICE=cpu MG_DIR=/tmp/mg PY=.venv/bin/python scripts/gpu/multigpu.sh all
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# The lent multi-GPU hosts: NVLink SHARP / multicast must stay off (NCCL, torch symmetric memory, NVSHMEM)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PY=${PY:-python3}
D=${PROOF_DIR:-/root/proof}
M=${MG_DIR:-$D/multigpu}
NPROC=${MG_PROCS:-2}
MINUTES=${MG_MINUTES:-4}          # training minutes per stage (the step under way when they run out finishes)
FSDP_MINUTES=${MG_FSDP_MINUTES:-3}  # FSDP generates with HF generate, slower steps: a smaller budget
REF_RUN=""                          # the single-GPU run the settings come from, compared as "proof"
KIND=${MULTI_DEVICE:-cuda}
mkdir -p "$M"

LAUNCH_EXTRA=() DEV=cuda
[ "$KIND" = cpu ] && LAUNCH_EXTRA=(--mixed_precision no) DEV=cpu
REF=${MG_REF_CONFIG:-}
[ "$KIND" = cpu ] || REF=${REF:-$D/grpo/config.toml}
if [ -n "$REF" ]; then
  if [ ! -f "$REF" ]; then
    echo "no reference config $REF: run scripts/gpu/proof.sh grpo first (or set MG_REF_CONFIG)" >&2
    exit 2
  fi
  REF_RUN=$(dirname "$REF")
  # the reference's geometry: one process rolls out per_device * accumulation rollouts per step
  read -r PER_DEVICE ACCUM GENERATIONS < <("$PY" -c 'import sys, tomllib; g = tomllib.load(open(sys.argv[1], "rb"))["grpo"]; print(g["per_device_train_batch_size"], g["gradient_accumulation_steps"], g["num_generations"])' "$REF")
  ENTRY=(-m fathom grpo --config "$REF")
  FSDP_ENTRY=("${ENTRY[@]}")
  [ "$KIND" = cpu ] && FSDP_ENTRY=(tests/train/cpu_fsdp.py "${ENTRY[@]}")
  SINGLE=("$PY" "${ENTRY[@]}")
  GEN_ARGS=()
  [ -n "${GEN_MODE:-}" ] && GEN_ARGS=(--rollout.generation_mode="$GEN_MODE")  # else the reference's mode
  BASE=(--run.device="$DEV" --logging.progress=false)
  echo "reference $REF: per_device_train_batch_size $PER_DEVICE x gradient_accumulation_steps $ACCUM, num_generations $GENERATIONS"
else  # CPU without a reference: tiny-cpu.toml through the test driver (its varied reward gives the loss
  # something to do); 4 rollouts a step
  ENTRY=(tests/train/grpo_driver.py)
  FSDP_ENTRY=(tests/train/cpu_fsdp.py tests/train/grpo_driver.py)
  SINGLE=("$PY" tests/train/grpo_driver.py)
  PER_DEVICE=2 ACCUM=2 GEN_ARGS=()
  BASE=(--run.device=cpu --grpo.max_steps="${MG_STEPS:-6}" --grpo.num_generations=2 --rollout.max_new_tokens=24
    --rollout.max_total_tokens=160 --eval.every=0 --logging.progress=false --checkpoint.save_every=2)
fi
if [ "$KIND" = cpu ]; then
  MINUTES=${MG_MINUTES:-1} FSDP_MINUTES=${MG_FSDP_MINUTES:-1}
fi
if [ $((ACCUM % NPROC)) -ne 0 ]; then
  echo "gradient_accumulation_steps $ACCUM of the reference does not divide over $NPROC processes" >&2
  exit 2
fi
MULTI_ACCUM=$((ACCUM / NPROC))
if [ -n "$REF" ] && [ "$NPROC" -gt 1 ] && [ $((PER_DEVICE % GENERATIONS)) -ne 0 ]; then
  echo "per_device_train_batch_size $PER_DEVICE is not whole groups of $GENERATIONS: a group would span ranks" >&2
  exit 2
fi

port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
launch() { # CONFIG: the accelerate launch prefix, with a fresh port (a killed run's port may linger)
  echo "$PY" -m accelerate.commands.launch --config_file "configs/accelerate/$1.yaml" --num_processes "$NPROC" \
    --main_process_port "$(port)" "${LAUNCH_EXTRA[@]}"
}
keep() { # collect small results in $M/keep (flat names); they go back to $OUT as one archive at the end
  mkdir -p "$M/keep"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$M/keep/$(echo "${f#"$M"/}" | tr / _)"; done
  return 0
}
run() { echo "+ $*"; "$@"; }
train_args() { # RUN_DIR ACCUM [MINUTES]
  echo "${BASE[@]}" --run.run_dir="$1" --run.max_minutes="${3:-$MINUTES}" \
    --grpo.per_device_train_batch_size="$PER_DEVICE" --grpo.gradient_accumulation_steps="$2"
}
keep_run() { # RUN_DIR
  keep "$1/metrics.jsonl" "$1/summary.json" "$1/config.toml"
  "$PY" - "$1" <<'PY'  # (step, rank, task) of every training rollout: the tasks-per-step check without the traces
import json, pathlib, sys
run = pathlib.Path(sys.argv[1])
with open(run / "tasks.tsv", "w") as out:
    for path in sorted(run.glob("traces*.jsonl")):
        rank = path.name.split(".")[1][4:] if path.name.count(".") == 2 else "0"
        for line in path.open():
            if '"kind": "train"' in line[:200]:
                t = json.loads(line)
                out.write(f"{t['step']}\t{rank}\t{t['task_id']}\n")
PY
  keep "$1/tasks.tsv"
}

stage_single() {
  # one process sees one GPU: with several visible, transformers' Trainer would wrap the model in
  # nn.DataParallel, which the GRPO trainer refuses (seen on the 2-GPU host)
  local one=()
  [ "$KIND" = cpu ] || one=(env CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}")
  # shellcheck disable=SC2046
  run "${one[@]}" "${SINGLE[@]}" $(train_args "$M/single" "$ACCUM") "${GEN_ARGS[@]}"
  keep_run "$M/single"
  stage_compare
}
stage_ddp() {
  # shellcheck disable=SC2046
  run $(launch ddp) "${ENTRY[@]}" $(train_args "$M/ddp" "$MULTI_ACCUM") "${GEN_ARGS[@]}"
  keep_run "$M/ddp"
  stage_compare
}
stage_fsdp() { # every forward is a collective: lockstep generation with HF generate (synced_gpus)
  # shellcheck disable=SC2046
  run $(launch fsdp) "${FSDP_ENTRY[@]}" $(train_args "$M/fsdp" "$MULTI_ACCUM" "$FSDP_MINUTES") \
    --rollout.generation_mode=plain
  keep_run "$M/fsdp"
  stage_compare
}
stage_kill() { # rank 1 killed mid-rollout; then the launcher itself
  local target status=0
  for target in rank launcher; do
    rm -rf "$M/kill-$target"
    # shellcheck disable=SC2046
    "$PY" bench/rank_death.py --target "$target" --ranks "$NPROC" --log "$M/kill-$target.log" -- \
      $(launch ddp) "${ENTRY[@]}" $(train_args "$M/kill-$target" "$MULTI_ACCUM") "${GEN_ARGS[@]}" \
      | tee "$M/kill-$target.txt" || status=1
    if command -v nvidia-smi > /dev/null; then  # and no process left holding a GPU
      echo "GPU compute processes after the kill:" | tee -a "$M/kill-$target.txt"
      nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv | tee -a "$M/kill-$target.txt" || true
    fi
    tail -n 40 "$M/kill-$target.log" > "$M/kill-$target.log.tail"
    keep "$M/kill-$target.txt" "$M/kill-$target.log.tail"
  done
  return $status
}
stage_compare() {
  local runs=()
  [ -n "$REF_RUN" ] && [ -f "$REF_RUN/metrics.jsonl" ] && runs+=("proof=$REF_RUN")
  for name in single ddp fsdp; do [ -f "$M/$name/metrics.jsonl" ] && runs+=("$name=$M/$name"); done
  [ ${#runs[@]} -gt 0 ] || { echo "nothing to compare yet"; return 0; }
  "$PY" bench/multigpu.py "${runs[@]}" --ref single --traces --json "$M/compare.json" | tee "$M/compare.txt"
  keep "$M/compare.txt" "$M/compare.json"
}

touch "$M/.started"  # what this invocation keeps goes back, not all earlier stages again
[ $# -gt 0 ] || { echo "usage: $0 single|ddp|fsdp|kill|compare|all ..." >&2; exit 2; }
for stage in "$@"; do
  if [ "$stage" = all ]; then set -- single ddp fsdp kill; break; fi
done
failed=0
for stage in "$@"; do
  start=$(date +%s)
  "stage_$stage" || failed=1
  echo "== stage $stage done in $(($(date +%s) - start)) s"
done
# $OUT (the lent machine's return folder) takes at most 8 files: what this invocation kept, as one archive
if [ -n "${OUT:-}" ] && [ -d "$M/keep" ]; then
  mkdir -p "$OUT" && (cd "$M" && find keep -type f -newer .started -print0 | tar -czf "$OUT/multigpu-$(IFS=-; echo "$*").tgz" --null -T -)
fi
exit $failed
