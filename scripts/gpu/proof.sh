#!/usr/bin/env bash
# The GPU proof (issue #8): does training with the environment in the loop teach SmolLM2-135M-Instruct the
# RLM discipline? SFT on expert transcripts -> GRPO with the environment in the rollout loop -> held-out
# evaluation against the baselines, every row on the same tasks.
#
#   scripts/gpu/proof.sh STAGE [STAGE...]     stages, in order: data baselines sft grpo final report (or: all)
#                                            (baselines = teacher direct untrained, each also a stage;
#                                            numerics = vLLM vs the eager model, first at every lease)
#
# Each stage is one `fathom` command (or a few) sized to end well inside the lent machine's 10-minute
# limit per command; state lives in $PROOF_DIR on that machine (kept while it stays warm between
# commands), and `grpo` is resumable: run it again and it continues from its newest checkpoint. Small
# results (summaries, metrics, the report's plots) are copied to $OUT when it is set, so they come back.
# On the GPU machine, run it after scripts/gpu/stage_smollm2_part{1,2}.sh (model, wheels, corpora) and
# scripts/gpu/stage_vllm.sh a/b/d (vLLM), with scripts/gpu/env.sh sourced.
#
# Rehearsal on a CPU with the tiny model (same commands, small sizes, ~5 min):
#   PROOF_SCALE=tiny PROOF_MODEL=tiny-smol PROOF_DEVICE=cpu PROOF_DIR=/tmp/proof PY=.venv/bin/python \
#     scripts/gpu/proof.sh all
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PY:-python3}
D=${PROOF_DIR:-/root/proof}
MODEL=${PROOF_MODEL:-smollm2-135m}
DEVICE=${PROOF_DEVICE:-cuda}
if [ "$DEVICE" != cpu ]; then source scripts/gpu/env.sh; fi  # the staged wheels and vLLM, and vLLM's settings
RECIPE=configs/smollm2-135m-gpu.toml
case ${PROOF_SCALE:-full} in
  full)  # 3 held-out tasks per family x length (one per difficulty: 7 x 4 x 3 = 84), the same for every row;
    # sized for one 30-minute GPU lease with HF `generate` (see GEN_MODE)
    HELDOUT=84 TRAIN=840 EVAL=42 SFT_TASKS=384 SFT_EPOCHS=${SFT_EPOCHS:-3} GRPO_MINUTES=${GRPO_MINUTES:-4.5} GRPO_STEPS=1000
    EVAL_BATCH=84 DIRECT_BATCH=28 NGROUPS=${NGROUPS:-8} ;;
  tiny)
    HELDOUT=84 TRAIN=84 EVAL=14 SFT_TASKS=8 SFT_EPOCHS=1 GRPO_MINUTES=${GRPO_MINUTES:-0.5} GRPO_STEPS=3
    EVAL_BATCH=84 DIRECT_BATCH=84 NGROUPS=1 ;;
  *) echo "PROOF_SCALE must be full or tiny" >&2; exit 2 ;;
esac
# Generation path for rollouts and evaluations: vLLM on a GPU (TRL's colocated engine in GRPO; staged by
# scripts/gpu/stage_vllm.sh, and checked against the eager model by the `numerics` stage), HF generate on a CPU.
GEN_MODE=${GEN_MODE:-$([ "$DEVICE" = cpu ] && echo plain || echo vllm)}
GRPO_LR=${GRPO_LR:-1e-4}  # LoRA; a short run (tens of steps) with no warm-up
G=${GRPO_DIR:-grpo} GRPO_SEED=${GRPO_SEED:-0}  # a second GRPO run (the seed's replicate) goes to another dir
# GRPO_ARGS: more `fathom grpo` flags, word-split (e.g. "--rollout.temperature=1.3 --grpo.loss_type=grpo")
HELDOUT_LENGTHS=(8K 32K 128K 400K)  # up to 50x SmolLM2's 8,192-token window (400K = 409,600 tokens)
ALL_TIER='[{name="all", lengths=[8192, 16384, 32768, 131072], difficulties=["easy", "medium", "hard"]}]'
EVAL_DTYPE=$([ "$DEVICE" = cpu ] && echo float32 || echo bfloat16)
fathom() { echo "+ fathom $*"; "$PY" -m fathom "$@"; }
keep() { # collect small results in $D/keep (flat names); they go back to $OUT as one archive at the end
  mkdir -p "$D/keep"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$D/keep/$(echo "${f#"$D"/}" | tr / _)"; done
  return 0
}
evaluate() { # NAME POLICY MODEL LABEL: both held-out splits (the training families and the unseen ones);
  # the training rollout's budget (4 turns of 384 tokens) for rlm
  local budget=() batch=$EVAL_BATCH split out
  [ "$2" = rlm ] && budget=(--max-turns 4 --max-new-tokens 384)
  [ "$2" = direct ] && batch=$DIRECT_BATCH  # a window-long prompt each: its prefill mask and KV cache are large
  for split in heldout heldout_unseen; do
    out="$D/eval/$1"; [ "$split" = heldout_unseen ] && out="$D/eval/$1-unseen"
    fathom eval --policy "$2" --model "$3" --label "$4" --tasks "$D/data/$split.jsonl" --out "$out" \
      --device "$DEVICE" --batch-size "$batch" "${budget[@]}" --generation-mode "$GEN_MODE" --dtype "$EVAL_DTYPE" \
      --overwrite --no-progress
    keep "$out/summary.json" "$out/eval.jsonl" "$out/traces.jsonl"
  done
}

stage_data() {
  fathom data build --out "$D/data" --seed 8 --train "$TRAIN" --eval "$EVAL" --heldout "$HELDOUT" \
    --train-lengths 8K 16K 32K 128K --eval-lengths 8K 32K --heldout-lengths "${HELDOUT_LENGTHS[@]}" \
    --heldout-unseen "$HELDOUT" --heldout-unseen-lengths "${HELDOUT_LENGTHS[@]}" --no-progress
  keep "$D/data/build.json"
}
stage_numerics() { # vLLM against the eager model (and plain generate), at every lease before anything else
  python3 bench/gpu_rollouts.py decode --model "$MODEL" --batches 64 --out "$D/numerics.json"
  keep "$D/numerics.json"
}
stage_teacher() { evaluate teacher teacher "$MODEL" "teacher (scripted, grounded)"; }
stage_direct() { evaluate direct direct "$MODEL" "direct, truncated (untrained)"; }
stage_untrained() { evaluate rlm-untrained rlm "$MODEL" "rlm (untrained)"; }
stage_baselines() { stage_teacher && stage_direct && stage_untrained; }
stage_sft() { # full fine-tune on correct expert transcripts of every train length and difficulty
  fathom sft --config "$RECIPE" --run.run_dir="$D/sft" --run.device="$DEVICE" --model.name="$MODEL" \
    --model.lora=false --data.train_tasks="$D/data/train.jsonl" --curriculum.tiers="$ALL_TIER" --eval.tier=0 \
    --sft.num_tasks="$SFT_TASKS" --sft.epochs="$SFT_EPOCHS" --sft.learning_rate=1e-4
  keep "$D/sft/summary.json" "$D/sft/metrics.jsonl"
  evaluate rlm-sft rlm "$D/sft/final/model" "rlm (SFT)"
}
stage_grpo() { # LoRA GRPO on the SFT model, curriculum over the recipe's tiers; resumes when run again
  # NGROUPS x 8 rollouts per step, generated at once; the loss runs in 4 micro-batches (full-vocabulary
  # logits of a whole generation batch at once would not fit in memory at larger NGROUPS)
  fathom grpo --config "$RECIPE" --run.run_dir="$D/$G" --run.device="$DEVICE" --model.name="$MODEL" \
    --run.seed="$GRPO_SEED" \
    --model.init_from="$D/sft/final/model" --data.train_tasks="$D/data/train.jsonl" \
    --data.eval_tasks="$D/data/eval.jsonl" --run.max_minutes="$GRPO_MINUTES" --grpo.max_steps="$GRPO_STEPS" \
    --grpo.per_device_train_batch_size=$((NGROUPS * 2)) --grpo.gradient_accumulation_steps=4 \
    --eval.every=0 --checkpoint.save_every=5 --logging.progress=false \
    --curriculum.min_dwell_steps=4 --rollout.generation_mode="$GEN_MODE" --model.dtype=bfloat16 \
    --grpo.learning_rate="$GRPO_LR" --grpo.warmup_steps=0 \
    --rollout.max_turns=4 --rollout.max_new_tokens=384 --rollout.max_total_tokens=2560 ${GRPO_ARGS:-}
  keep "$D/$G/summary.json" "$D/$G/metrics.jsonl" "$D/$G/config.toml"
  { head -n 64 "$D/$G/traces.jsonl"; tail -n 128 "$D/$G/traces.jsonl"; } > "$D/$G/traces_sample.jsonl"
  keep "$D/$G/traces_sample.jsonl"  # whole conversations, first and last rollouts of the run
}
stage_final() {
  local label="rlm (SFT+GRPO)"
  [ "$G" = grpo ] || label="rlm (SFT+GRPO, $G)"
  evaluate "rlm-$G" rlm "$D/$G/final/merged" "$label"
}
stage_report() {
  ln -sfn "$D/eval" "$D/grpo/evals"
  fathom report "$D/grpo" --out "$D/report"
  keep "$D"/report/*.png
}

mkdir -p "$D" && touch "$D/.started"  # what this invocation keeps goes back, not all earlier stages again
[ $# -gt 0 ] || { echo "usage: $0 data|baselines|sft|grpo|final|report|all ..." >&2; exit 2; }
for stage in "$@"; do
  if [ "$stage" = all ]; then set -- data baselines sft grpo final report; break; fi
done
for stage in "$@"; do
  start=$(date +%s)
  "stage_$stage"
  echo "== stage $stage done in $(($(date +%s) - start)) s"
done
# $OUT (the lent machine's return folder) takes at most 8 files: what this invocation kept, as one archive
if [ -n "${OUT:-}" ] && [ -d "$D/keep" ]; then
  mkdir -p "$OUT" && (cd "$D" && find keep -type f -newer .started -print0 | tar -czf "$OUT/proof-$(IFS=-; echo "$*")${GRPO_DIR:+-$GRPO_DIR}.tgz" --null -T -)
fi
