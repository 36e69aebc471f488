#!/usr/bin/env bash
# Issue #14's GPU figures, in stages that each fit one 10-minute call on the warm machine (after
# stage_smollm2_part{1,2}.sh and stage_vllm.sh a/b/d; every figure beside its baseline, same run):
#   scripts/gpu/rollouts.sh decode      plain generate vs vLLM, +-LoRA, batch 64/256/1024, numerics vs eager
#   scripts/gpu/rollouts.sh engine      continuous batching vs turn-synchronous batches, same tasks
#   scripts/gpu/rollouts.sh spec        the engine without and with n-gram speculative decoding, same tasks,
#                                       greedy: speed and how far the turns agree (the same outputs expected)
#   scripts/gpu/rollouts.sh sft         a small SFT warm start (128 teacher transcripts, 1 epoch) for the GRPO steps
#   scripts/gpu/rollouts.sh sftrecipe   the recipe's own SFT instead (configs/smollm2-135m-gpu.toml [sft]: 512
#                                       generated teacher tasks, 2 epochs, lr 2e-4): the trained warm start that
#                                       issue #14's baseline (run 2's 60-s step) was measured after
#   scripts/gpu/rollouts.sh evalvllm    fathom eval through vLLM (rlm and direct, the SFT model, 16 tasks)
#   scripts/gpu/rollouts.sh grpo64      GRPO after SFT through TRL's colocated vLLM: 64 rollouts a step
#   scripts/gpu/rollouts.sh grpo256     the same at 256 rollouts a step
#   scripts/gpu/rollouts.sh levers64    64 rollouts a step, today's settings then the speed levers ($LEVERS),
#                                       2 steps each (step 1 is warm-up); ~3.5 min: two trainer + engine
#                                       starts (~70 s each) and ~4 steps of 10-15 s
#   scripts/gpu/rollouts.sh levers256   the same at 256 rollouts; ~5 min (steps of 25-40 s). Each writes
#                                       $OUT/gpu_rollouts_levers.json with every pair measured so far, side by
#                                       side (bench/gpu_rollouts.py levers): copy it to bench/results/
#   (the levers stages need the sft stage's warm start on the same warm machine; one lever against today's
#   recipe: BASE_ARGS= LEVERS="--rollout.vllm_ngram_speculative_tokens=4" bash scripts/gpu/rollouts.sh levers64)
# Results go to $OUT (JSON and logs); bench/results/gpu_rollouts.json is assembled from them here.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/env.sh
D=${ROLLOUT_DIR:-/root/rollouts}
O=${OUT:-/tmp/out}
M=${MODEL:-smollm2-135m}
mkdir -p "$D" "$O"
fathom() { echo "+ fathom $*"; python3 -m fathom "$@"; }
step_summary() { # RUN LABEL: per-step timing rows from metrics.jsonl (the first step includes engine warm-up)
  python3 - "$1" "$2" <<'PY'
import json, sys
run, label = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"time/step_s"' in l]
keys = ("time/step_s", "time/generate_s", "time/env_s", "time/optimise_s", "throughput/generate_tokens_per_s",
        "throughput/sampled_tokens_per_s", "rollout/engine_calls", "time/engine_call_ms", "accuracy", "reward/env")
out = [{k: r.get(k) for k in ("step", *keys)} for r in rows]
for r in out:
    print(label, json.dumps(r))
json.dump(out, open(f"{run}/steps.json", "w"), indent=1)
PY
}
# The speed levers (issue #14): vLLM's scheduler (async scheduling asked for explicitly, so that vLLM refuses
# to start where it cannot; 4x TRL's batched tokens) and fewer padded tokens in the trainer's forwards. The
# stages add max_num_seqs = 2 x the rollouts (room for the policy's llm() requests beside its turns).
LEVERS=${LEVERS:---rollout.vllm_async_scheduling=on --rollout.vllm_max_num_batched_tokens=16384 --grpo.group_by_length=true}
# what the baseline run adds to the recipe: by default the settings before the levers (the recipe groups by
# length since they were measured); BASE_ARGS= (empty) compares a lever with today's recipe
BASE_ARGS=${BASE_ARGS---grpo.group_by_length=false}
grpo() { # NAME PER_DEVICE GA [EXTRA ...]: GRPO after SFT, LoRA, vLLM colocated, 4 turns x 384 tokens, sub-calls
  local name=$1 per=$2 ga=$3; shift 3
  rm -rf "$D/$name"
  # vLLM's start-up INFO lines (async scheduling, batched tokens) into the log for `gpu_rollouts.py levers`:
  # TRL sets VLLM_LOGGING_LEVEL=ERROR where it is unset (trl/_compat.py)
  VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-INFO} \
  fathom grpo --config configs/smollm2-135m-gpu.toml --run.run_dir="$D/$name" --run.device=cuda --model.name="$M" \
    --model.init_from="$D/sft/final/model" --data.train_tasks="$D/data/train.jsonl" \
    --data.eval_tasks="$D/data/eval.jsonl" --grpo.max_steps="${GRPO_STEPS:-4}" \
    --grpo.per_device_train_batch_size="$per" --grpo.gradient_accumulation_steps="$ga" --grpo.warmup_steps=0 \
    --grpo.learning_rate=1e-4 --eval.every=0 --checkpoint.save_every=1000 --logging.progress=false \
    --rollout.generation_mode=vllm --rollout.max_turns=4 --rollout.max_new_tokens=384 \
    --rollout.max_total_tokens=2560 --rollout.sub_lm=policy --model.dtype=bfloat16 --curriculum.min_dwell_steps=1000 \
    "$@" 2>&1 | tee "$O/$name.log"
  step_summary "$D/$name" "$name" | tee "$O/${name}_steps.txt"
  cp "$D/$name/steps.json" "$O/${name}_steps.json"
}
levers() { # ROLLOUTS GA: today's settings, then the levers, same warm start; then every pair so far side by side
  # shellcheck disable=SC2086  # LEVERS is a list of options
  # shellcheck disable=SC2086  # BASE_ARGS too
  GRPO_STEPS=${GRPO_STEPS:-2} grpo "base$1" 16 "$2" $BASE_ARGS
  GRPO_STEPS=${GRPO_STEPS:-2} grpo "levers$1" 16 "$2" $LEVERS --rollout.vllm_max_num_seqs=$((2 * $1))
  python3 bench/gpu_rollouts.py levers --runs "$D" --logs "$O" --lever-args="$LEVERS" \
    --out "$O/gpu_rollouts_levers.json" 2>&1 | tee "$O/levers$1_summary.txt"
}
for stage in "$@"; do
  start=$(date +%s)
  case $stage in
    decode) python3 bench/gpu_rollouts.py decode --model "$M" --out "$O/decode.json" 2>&1 | tee "$O/decode.log" ;;
    engine) python3 bench/gpu_rollouts.py engine --model "$M" --tasks 64 --out "$O/engine.json" 2>&1 | tee "$O/engine.log" ;;
    spec) # vLLM's n-gram proposer is JIT-compiled by numba: the image's own (shared/gpu/vllm carries none)
      python3 -c "import numba, numpy; print('numba', numba.__version__, 'numpy', numpy.__version__)"
      python3 bench/gpu_rollouts.py spec --model "$M" --tasks 64 --out "$O/spec.json" 2>&1 | tee "$O/spec.log" ;;
    sft|sftrecipe)
      fathom data build --out "$D/data" --seed 8 --train 256 --eval 16 --heldout 16 --train-lengths 8K 16K 32K \
        --eval-lengths 8K --heldout-lengths 8K --no-progress
      if [ "$stage" = sft ]; then  # 128 draws from GRPO's pool of 256 tasks
        sft_args=(--data.train_tasks="$D/data/train.jsonl" --sft.num_tasks="${SFT_TASKS:-128}" --sft.epochs=1 --sft.learning_rate=1e-4)
      else sft_args=(--data.train_tasks=); fi  # the recipe's [sft], on tasks generated for SFT
      fathom sft --config configs/smollm2-135m-gpu.toml --run.run_dir="$D/sft" --run.device=cuda --model.name="$M" \
        --model.lora=false "${sft_args[@]}" --eval.tier=0 --curriculum.tiers='[{name="all", lengths=[8192, 16384, 32768], difficulties=["easy", "medium", "hard"]}]' \
        2>&1 | tail -20 | tee "$O/sft.log"
      cp "$D/sft/summary.json" "$O/sft_summary.json" ;;
    evalvllm) # fathom eval through vLLM: the SFT model in the scaffold and the direct baseline, 16 tasks each
      for policy in rlm direct; do
        fathom eval --policy "$policy" --model "$D/sft/final/model" --tasks "$D/data/heldout.jsonl" \
          --out "$D/eval-$policy" --generation-mode vllm --dtype bfloat16 --batch-size 16 --max-turns 4 \
          --max-new-tokens 384 --overwrite --no-progress 2>&1 | tail -15 | tee "$O/eval-$policy.log"
        cp "$D/eval-$policy/summary.json" "$O/eval-$policy-summary.json"
      done ;;
    # GRPO_EXTRA: options added to both (the speed levers, say)
    # shellcheck disable=SC2086  # a list of options
    grpo64) grpo grpo64 16 4 ${GRPO_EXTRA:-} ;;
    # shellcheck disable=SC2086
    grpo256) grpo grpo256 16 16 ${GRPO_EXTRA:-} ;;
    grpo64-onebatch) grpo grpo64-onebatch 64 1 ;;
    levers64) levers 64 4 ;;
    levers256) levers 256 16 ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
  echo "== stage $stage done in $(($(date +%s) - start)) s"
done
