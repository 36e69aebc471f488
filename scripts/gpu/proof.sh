#!/usr/bin/env bash
# The GPU proof (issue #16; runs 3 and 4): teacher SFT (stopped by held-out loss and an entropy floor) -> GRPO with
# the environment in the loop, through TRL's colocated vLLM, twice side by side (PROOF_GRPO_RUNS: the policy's
# llm() answers trained as rows of their own, and masked; or trained at two learning rates) -> evaluation of
# direct, untrained, SFT and both SFT+GRPO runs on
# the training families' held-out split and the unseen families' split, 8K to 400K tokens.
#
#   scripts/gpu/proof.sh STAGE [STAGE...]   data model sft baselines sft_eval grpo final report pack, or pipeline
#                                           (settings: what the environment resolves to, into the progress log;
#                                           sft_merge, reader_sft, sft_eval_br, sft_eval_tr: see PROOF_EVAL_READER;
#                                           teacher_br: see PROOF_TEACHER_READER)
#   scripts/gpu/proof.sh start              the pipeline in its own process session (it outlives the device
#                                           call; the machine keeps it while calls follow within 30 s)
#   scripts/gpu/proof.sh wait SECONDS       progress until the pipeline ends or SECONDS pass; when it has
#                                           ended, its archive goes to $OUT
#   scripts/gpu/proof.sh bring [CALL]       (PROOF_SFT_LORA=1) pack what a later session needs to continue GRPO,
#                                           and put one call's share of its pieces in $OUT (below)
#   scripts/gpu/proof.sh restore            in a later session: take this call's carried pieces; once all are
#                                           here, rebuild the state, so that `start` continues GRPO
#
# The pipeline runs what can share the GPU at once: the baselines during SFT, the SFT evaluation (and with
# PROOF_SFT_EVAL_REPETITION_PENALTY a second one at that penalty) beside the GRPO runs, the final evaluations
# together. GRPO stops by `run.max_minutes`, computed so that the whole
# pipeline ends by PROOF_BUDGET_S seconds after `start` (it checkpoints every 10 steps, and `grpo` resumes
# from the newest checkpoint when run again on the same machine).
# On the GPU machine, run it after scripts/gpu/stage_smollm2_part{1,2}.sh and scripts/gpu/stage_vllm.sh a/b/d;
# with PROOF_MODEL=qwen2.5-coder-0.5b or -1.5b, after the calls that scripts/gpu/prepare_carry_qwen.sh (with
# QWEN_SIZE=0.5b or 1.5b) lists in .qplan
# (the `model` stage joins and converts the carried GGUF while `data` builds the tasks).
#
# Across sessions (the GPU machine is fresh each lease): with PROOF_SFT_LORA=1, SFT trains a LoRA adapter
# (rank PROOF_SFT_LORA_R, default 64, alpha 2r) and GRPO continues that same adapter, so a GRPO checkpoint's
# adapter holds everything beyond the offline base model (a full fine-tune's 270 MB-1 GB cannot come back).
# `bring` packs the newest checkpoint of each GRPO run without optimizer.pt (or, where no GRPO ran, the SFT
# adapter, so that a later lease starts GRPO without SFT again), the run's metrics, the kept results, the
# finished stages, the settings and the data's sha256 into one tar in pieces of 15 MiB with a manifest
# (scripts/gpu/carry_pieces.sh); each call returns the manifest and as many pieces as fit the 8 files and
# 64 MiB a call may return (4 of 15 MiB). The settings packed are those the run began with ($D/settings.record),
# whatever the bring call's environment says. Then here: scripts/gpu/prepare_carry_back.sh DIR... writes carry
# folders .cb1 ... and their calls (.cbplan), each call `proof.sh restore`, the last `restore && start`.
# Without optimizer.pt, HF's Trainer loads neither the optimizer nor the scheduler (it loads the two together,
# trainer.py `_load_optimizer_and_scheduler`): the carried run restarts AdamW's moments and the learning-rate
# schedule (constant_with_warmup: 5 warm-up steps again, the first at lr 0) while the adapter, global step, RNG state and
# FATHOM's recipe state (curriculum, penalty) continue.
# Size, Qwen2.5-Coder-0.5B at r=64 over all linear layers: 24 layers x 64 x (q 896+896, k 896+128, v 896+128,
# o 896+896, gate/up/down 896+4864 each) = 35.2M parameters, saved in fp32 (PEFT keeps adapters in fp32 over
# a bf16 base) = 141 MB a run before gzip (the CPU rehearsal's adapter gzipped to 74%): at most 9 pieces
# (3 bring calls) for one run, 18 (5 calls) for both, and 3 or 5 calls of ~60 MB to carry them back in.
# SmolLM2-135M at r=64: 19.5M parameters, 78 MB a run.
#
# Rehearsal on a CPU with the tiny model (same stages, small sizes):
#   PROOF_SCALE=tiny PROOF_MODEL=tiny-smol PROOF_DEVICE=cpu PROOF_DIR=/tmp/proof PY=.venv/bin/python \
#     scripts/gpu/proof.sh pipeline
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PY:-python3}
D=${PROOF_DIR:-/root/proof}
MODEL=${PROOF_MODEL:-smollm2-135m}
DEVICE=${PROOF_DEVICE:-cuda}
if [ "$DEVICE" != cpu ]; then source scripts/gpu/env.sh; fi  # the staged wheels and vLLM, and vLLM's settings
RECIPE=configs/smollm2-135m-gpu.toml
BUDGET_S=${PROOF_BUDGET_S:-1440}
case ${PROOF_SCALE:-full} in
  full)  # held-out: 3 tasks per family x length on the 20 training families, 6 on the 7 unseen ones
    HELDOUT=240 UNSEEN=168 LENGTHS=(8K 32K 128K 400K) TRAIN=840 EVAL=60 SFT_TASKS=512 SFT_EPOCHS=3
    TURNS=10 NEW=384 TOTAL=8192 SFT_BATCH=8 SFT_EVAL_EVERY=20 MICRO=4 ACCUM=4 EVAL_BATCH=120 MEM=0.1
    FINAL_RESERVE_S=270 ;;
  tiny)
    HELDOUT=20 UNSEEN=7 LENGTHS=(8K) TRAIN=240 EVAL=8 SFT_TASKS=12 SFT_EPOCHS=1
    TURNS=2 NEW=320 TOTAL=2048 SFT_BATCH=4 SFT_EVAL_EVERY=2 MICRO=4 ACCUM=2 EVAL_BATCH=27 MEM=0.1
    FINAL_RESERVE_S=120 ;;
  *) echo "PROOF_SCALE must be full or tiny" >&2; exit 2 ;;
esac
SFT_ACCUM=1 SFT_LR=1e-4 LR=1e-4 SUBCALL_ROWS=8 SHARE=0.36 SUBCALL_CHECKPOINTING=false
SFT_LORA=${PROOF_SFT_LORA:-0} SFT_LORA_R=${PROOF_SFT_LORA_R:-64}
SFT_LORA_ALPHA=${PROOF_SFT_LORA_ALPHA:-$((2 * SFT_LORA_R))}
case $SFT_LORA in 0|1) ;; *) echo "PROOF_SFT_LORA must be 0 or 1" >&2; exit 2 ;; esac
case $MODEL in qwen2.5-coder-0.5b|qwen2.5-coder-1.5b) QWEN_SIZE=${MODEL#qwen2.5-coder-} ;; *) QWEN_SIZE= ;; esac
if [ -n "$QWEN_SIZE" ]; then
  # 0.5B parameters and a 151,936-token vocabulary: half the sequences a micro-batch (the same effective batch),
  # and learning rates for a model 3.7x SmolLM2's size (run 3's 1e-4 GRPO lost tasks on the 135M model)
  SFT_ACCUM=$((SFT_BATCH / 4)) SFT_BATCH=4 ACCUM=$((ACCUM * MICRO / 2)) MICRO=2 SFT_LR=5e-5 LR=2e-5
  [ "${PROOF_SCALE:-full}" = tiny ] || FINAL_RESERVE_S=${PROOF_FINAL_RESERVE_S:-330}
  # runs 4 and 5: the sub-calls run ran out of its share (50.3 GiB at 8 sub-call rows, 58.7 GiB at 4) in the
  # forward: a sub-call row is widened to the widest prompt (a chunk) plus the widest completion (a whole
  # episode), so activations are checkpointed there
  SUBCALL_ROWS=4 SHARE=0.42 SUBCALL_CHECKPOINTING=true
  # what its own reader is shown of an llm() call, in SFT's reader rows, GRPO and the evaluations alike (runs
  # 3-10 showed it 2,048 tokens in SFT and GRPO but 8,064 in evaluation); the teacher's 7,680-character chunks
  # of dense text fit it (bench/RESULTS.md, "The reader's view")
  SUB_INPUT=4096
fi
if [ "$QWEN_SIZE" = 1.5b ]; then
  # 1.5B: 3.6x the 0.5B's parameters outside the embeddings and 1.7x the width of its full-vocabulary logits:
  # half the sequences a micro-batch again (the same effective batch), and the learning rates lowered as
  # models grow (SFT's 3e-5 for the under-one-epoch SFT a lease leaves time for)
  SFT_ACCUM=$((SFT_ACCUM * 2)) SFT_BATCH=2 ACCUM=$((ACCUM * MICRO)) MICRO=1 SFT_LR=3e-5 LR=1e-5
fi
SUB_INPUT=${PROOF_SUB_INPUT_TOKENS:-${SUB_INPUT:-2048}}
# a LoRA adapter's SFT learns at ~10x the full fine-tune's rate (the usual LoRA practice; run 15's r=32 adapter
# at 3.3x solved 66 held-out tasks where run 14's full fine-tune solved 110)
if [ "$SFT_LORA" = 1 ]; then SFT_LR=$(awk "BEGIN { print 10 * $SFT_LR }"); fi
MICRO=${PROOF_MICRO:-$MICRO} ACCUM=${PROOF_ACCUM:-$ACCUM} SFT_LR=${PROOF_SFT_LR:-$SFT_LR}
SFT_EPOCHS=${PROOF_SFT_EPOCHS:-$SFT_EPOCHS} SFT_TASKS=${PROOF_SFT_TASKS:-$SFT_TASKS}
# SFT stops once held-out policy entropy (nats a token, sampled at temperature 1) falls below this, keeping
# the last checkpoint above it: GRPO needs a policy that still samples different episodes
SFT_ENTROPY_FLOOR=${PROOF_SFT_ENTROPY_FLOOR:-0.03}
# neither the floor nor patience stops SFT before this many epochs (sft.min_epochs)
SFT_MIN_EPOCHS=${PROOF_SFT_MIN_EPOCHS:-0}
# the share of the teacher's cells first written with a slip and repaired on the next turn (fathom.policies.slips):
# transcripts that show an error and its recovery
SFT_TEACHER_SLIPS=${PROOF_SFT_TEACHER_SLIPS:-0}
# reader-role rows (an llm() prompt and chunk -> the teacher reader's reply) per trained transcript, drawn by
# kind (fathom.train.reader_sft.READER_MIX): the student answers its own llm() calls, so this trains its reading
SFT_READER_RATIO=${PROOF_SFT_READER_RATIO:-1.0}
# mixed: reader rows share optimizer steps with transcripts (their few tokens ~2% of the loss, run 17); own:
# steps of their own (fathom.train.sft_batches)
SFT_READER_BATCHES=${PROOF_SFT_READER_BATCHES:-mixed}
case $SFT_READER_BATCHES in mixed|own) ;; *) echo "PROOF_SFT_READER_BATCHES must be mixed or own" >&2; exit 2 ;; esac
# where SFT's tasks come from. generated: SFT_TASKS distinct tasks of the training families, made for SFT;
# pool: drawn from data/train.jsonl (GRPO's pool), where 512 draws from 840 tasks give 388 distinct (runs 3-7)
SFT_TASK_SOURCE=${PROOF_SFT_TASK_SOURCE:-generated}
case $SFT_TASK_SOURCE in
  generated) SFT_POOL= ;;
  pool) SFT_POOL=$D/data/train.jsonl ;;
  *) echo "PROOF_SFT_TASK_SOURCE must be generated or pool" >&2; exit 2 ;;
esac
GRPO_LR=${GRPO_LR:-$LR}
# which GRPO runs train side by side after SFT. both: sub-calls trained (grpo/) and masked (grpo-masked/);
# lr-pair: sub-calls trained at GRPO_LR (grpo/) and at GRPO_LR_B (grpo-b/), a learning rate chosen by
# measurement; trained: grpo/ alone, with 1.5x the memory share and the GPU's compute to itself; none: no
# GRPO (a lease too short for GRPO after SFT measures what SFT alone learned: SFT and its evaluation only)
# run: the baselines (direct, untrained scaffold) are evaluated beside SFT; skip: not in this run, where an
# earlier run evaluated the same model on the same held-out files (their greedy results are the same), so SFT
# has the GPU to itself and the lease's time goes to training (for proof_tables, put the earlier run's
# eval_direct* and eval_rlm-untrained* files beside this run's keep/ files)
BASELINES=${PROOF_BASELINES:-run}
case $BASELINES in run|skip) ;; *) echo "PROOF_BASELINES must be run or skip" >&2; exit 2 ;; esac
# base: the teacher's own moves with the untrained model reading its llm() calls (teacher-br), beside SFT: what the
# moves the student imitates are worth with that reader, the ceiling of rlm-sft-br and rlm-grpo-br; none: not run
TEACHER_READER=${PROOF_TEACHER_READER:-none}
case $TEACHER_READER in none|base) ;; *) echo "PROOF_TEACHER_READER must be none or base" >&2; exit 2 ;; esac
GRPO_RUNS=${PROOF_GRPO_RUNS:-both}
GRPO_LR_B=${GRPO_LR_B:-$(awk "BEGIN { print 2.5 * $GRPO_LR }")}
case $GRPO_RUNS in
  both|lr-pair) ;;
  trained) SHARE=$(awk "BEGIN { print 1.5 * $SHARE }") ;;
  none) ;;
  *) echo "PROOF_GRPO_RUNS must be both, lr-pair, trained or none" >&2; exit 2 ;;
esac
# run: the GRPO runs are evaluated when they stop; skip: not in this lease, whose GRPO steps are too few to
# differ from SFT: the time goes to steps, and `bring` carries the run to a later lease that evaluates it
GRPO_FINALS=${PROOF_GRPO_FINALS:-run}
case $GRPO_FINALS in
  run) ;;
  skip) FINAL_RESERVE_S=0 ;;
  *) echo "PROOF_GRPO_FINALS must be run or skip" >&2; exit 2 ;;
esac
# Each GRPO run's share of the GPU's memory (run.gpu_memory_fraction): both runs train side by side, and the
# one that outgrows its share fails alone (run 3's sub-calls run took 88.8 GiB and starved the other)
GRPO_GPU_SHARE=${GRPO_GPU_SHARE:-$([ "$DEVICE" = cpu ] && echo 0 || echo "$SHARE")}
# Several vLLM engines share the GPU (evaluations beside training): each gets a fixed KV cache, since vLLM's
# start-up memory profile aborts when another process frees GPU memory while it runs
KV_GIB=${KV_GIB:-6}
GEN_MODE=${GEN_MODE:-$([ "$DEVICE" = cpu ] && echo plain || echo vllm)}
GRPO_SEED=${GRPO_SEED:-0}
# every train length and difficulty, for the SFT transcripts
ALL_TIER='[{name="all", lengths=[8192, 16384, 32768, 131072], difficulties=["easy", "medium", "hard"]}]'
EVAL_DTYPE=$([ "$DEVICE" = cpu ] && echo float32 || echo bfloat16)
# Greedy evaluation fell into one-token loops on unseen families; > 1 tries the repetition penalty on every policy
EVAL_REP_PENALTY=${PROOF_EVAL_REPETITION_PENALTY:-1.0}
# set: the SFT model is evaluated a second time (rlm-sft-rp) at this penalty, beside its first evaluation, so
# one run measures what the penalty does to the same model on the same tasks
SFT_EVAL_REP_PENALTY=${PROOF_SFT_EVAL_REPETITION_PENALTY:-}
# who reads the trained models' llm() calls in the evaluations. own: the model itself (as in training); both:
# also the untrained model (rlm-sft-br, rlm-grpo-br, beside the first evaluations). Run 13's student reader
# answered "not found" to 41 of 43 unseen calls: this measures what the policy's moves are worth with a reader
# that SFT on the training families' questions did not narrow
# trained: a reader of its own, a LoRA on the base model trained on SFT's recorded reader calls alone
# (sft.rows=reader: the rows are the whole loss, where inside the student's SFT they were ~2% of it, run 17),
# reads the SFT model's calls (rlm-sft-tr, beside rlm-sft: the same moves, another reader); all: both and trained
# both: every evaluation runs on both held-out splits; unseen: on the unseen families' split alone (a lease
# too short for both, where the training families' figures of the same settings are already measured)
EVAL_SPLITS=${PROOF_EVAL_SPLITS:-both}
case $EVAL_SPLITS in both|unseen) ;; *) echo "PROOF_EVAL_SPLITS must be both or unseen" >&2; exit 2 ;; esac
EVAL_READER=${PROOF_EVAL_READER:-own}
case $EVAL_READER in own|both|trained|all) ;; *) echo "PROOF_EVAL_READER must be own, both, trained or all" >&2; exit 2 ;; esac
UNTRAINED_READER=$([[ $EVAL_READER =~ ^(both|all)$ ]] && echo 1 || echo 0)
TRAINED_READER=$([[ $EVAL_READER =~ ^(trained|all)$ ]] && echo 1 || echo 0)
# the reader trained apart: reader rows per usable SFT transcript (drawn from distinct calls, kinds stratified by
# fathom.train.reader_sft.READER_MIX), epochs and learning rate (LoRA, PROOF_SFT_LORA_R). A reader row averages
# ~1,900 tokens (its chunk) against a transcript's ~2,300, so 1.5 rows a transcript cost about as much as the
# student's SFT on its transcripts alone: ~1,400 rows, half of them answers, from the 1,024 tasks' calls
READER_SFT_RATIO=${PROOF_READER_SFT_RATIO:-1.5}
READER_SFT_EPOCHS=${PROOF_READER_SFT_EPOCHS:-1}
READER_SFT_LR=${PROOF_READER_SFT_LR:-3e-4}
# who reads the policy's llm() calls in GRPO. own: the policy itself (its sub-calls trained or masked, per run);
# base: the untrained model, frozen (rollout.sub_lm = "base", the 1.5B reference recipe's reader): the SFT
# adapter is trained further and switched off for each llm() call, so it needs PROOF_SFT_LORA=1; the sub-calls
# are then not the policy's to train, and the models are evaluated with the untrained reader too. trained: the
# reader trained apart (PROOF_EVAL_READER=trained's), frozen (rollout.sub_lm = "model", HF generate beside TRL's
# vLLM engine): it is trained before GRPO starts, and the SFT and GRPO models are evaluated with it too
GRPO_READER=${PROOF_GRPO_READER:-own}
case $GRPO_READER in
  own) ;;
  base)
    [ "$SFT_LORA" = 1 ] || { echo "PROOF_GRPO_READER=base needs PROOF_SFT_LORA=1: with the adapter off, the untrained model reads" >&2; exit 2; }
    [ "$GRPO_RUNS" = both ] && { echo "PROOF_GRPO_READER=base trains no sub-calls: PROOF_GRPO_RUNS=both (trained vs masked) does not apply" >&2; exit 2; }
    [ "$TRAINED_READER" = 1 ] && { echo "PROOF_GRPO_READER=base evaluates with the untrained reader: PROOF_EVAL_READER=$EVAL_READER does not apply" >&2; exit 2; }
    EVAL_READER=both UNTRAINED_READER=1 ;;
  trained)
    # one GRPO run, which waits for the reader's training (sub-calls are not the policy's: nothing to mask)
    [ "$GRPO_RUNS" = trained ] || { echo "PROOF_GRPO_READER=trained runs one GRPO run: PROOF_GRPO_RUNS=trained" >&2; exit 2; }
    [ "$EVAL_READER" = all ] || EVAL_READER=trained
    TRAINED_READER=1 ;;
  *) echo "PROOF_GRPO_READER must be own, base or trained" >&2; exit 2 ;;
esac
if [ "$TRAINED_READER" = 1 ] && [ "$GRPO_RUNS" != none ] && [ "$GRPO_READER" != trained ]; then
  # the reader's training and its evaluation share the GPU with the SFT evaluation; beside GRPO runs that do
  # not wait for it they are unmeasured
  echo "PROOF_EVAL_READER=$EVAL_READER runs with PROOF_GRPO_RUNS=none or PROOF_GRPO_READER=trained" >&2; exit 2
fi
if [ "$SFT_LORA" = 1 ]; then
  SFT_MODEL_ARGS=(--model.lora=true --model.lora_r="$SFT_LORA_R" --model.lora_alpha="$SFT_LORA_ALPHA")
  SFT_MODEL=$D/sft/final/merged
  # adapter off is the base model, not the SFT model: fathom refuses log_kl there (fathom.train.reference_kl)
  LOG_KL=false
else
  SFT_MODEL_ARGS=(--model.lora=false) SFT_MODEL=$D/sft/final/model LOG_KL=true
fi
BRING_PIECE=${PROOF_BRING_PIECE:-$((15 * 1024 * 1024))}  # under the 16 MiB a returned file may have
# what one call may return: 8 files (the manifest and 7 pieces) and 64 MiB together, the manifest's 4 KiB kept
BRING_CALL_BYTES=${PROOF_BRING_CALL_BYTES:-$((64 * 1024 * 1024))}
BRING_PER_CALL=$(( (BRING_CALL_BYTES - 4096) / BRING_PIECE ))
[ "$BRING_PER_CALL" -le 7 ] || BRING_PER_CALL=7
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$D/progress.log"; }
fathom() { echo "+ fathom $*"; "$PY" -m fathom "$@"; }
keep() { # small results into $D/keep (flat names); `pack` archives them
  mkdir -p "$D/keep"
  for f in "$@"; do [ -f "$f" ] && cp "$f" "$D/keep/$(echo "${f#"$D"/}" | tr / _)"; done
  return 0
}
evaluate() { # NAME POLICY MODEL LABEL [PENALTY [READER]]: both held-out splits, one model load; the rollouts'
  # budget for rlm; READER: a second model (its own vLLM engine) answers the policy's llm() calls
  local budget=()
  [ "$2" = rlm ] && budget=(--max-turns "$TURNS" --max-new-tokens "$NEW" --sub-max-input-tokens "$SUB_INPUT")
  [ -n "${6:-}" ] && budget+=(--reader-model "$6")
  local tasks=("$D/data/heldout.jsonl" "$D/data/heldout_unseen.jsonl") outs=("$D/eval/$1" "$D/eval/$1-unseen")
  if [ "$EVAL_SPLITS" = unseen ]; then tasks=("${tasks[1]}") outs=("${outs[1]}"); fi
  fathom eval --policy "$2" --model "$3" --label "$4" --tasks "${tasks[@]}" --out "${outs[@]}" \
    --device "$DEVICE" --batch-size "$EVAL_BATCH" "${budget[@]}" --generation-mode "$GEN_MODE" \
    --dtype "$EVAL_DTYPE" --vllm-memory "$MEM" --vllm-kv-cache-gib "$KV_GIB" --overwrite --no-progress \
    --repetition-penalty "${5:-$EVAL_REP_PENALTY}" > "$D/logs/eval-$1.log" 2>&1
  for out in "${outs[@]}"; do keep "$out/summary.json" "$out/eval.jsonl"; done
  if [ -f "$D/eval/$1-unseen/traces.jsonl" ]; then  # whole episodes of the unseen families (rlm rows)
    head -n 24 "$D/eval/$1-unseen/traces.jsonl" > "$D/eval/$1-unseen/traces_sample.jsonl"
    keep "$D/eval/$1-unseen/traces_sample.jsonl"
  fi
  if [ -f "$D/eval/$1/traces.jsonl" ]; then  # and of the training families: every 7th (7 is prime to the
    # 20 families the held-out file cycles through, so each family is sampled)
    awk 'NR % 7 == 1' "$D/eval/$1/traces.jsonl" > "$D/eval/$1/traces_sample.jsonl"
    keep "$D/eval/$1/traces_sample.jsonl"
  fi
}

stage_data() {
  fathom data build --out "$D/data" --seed 8 --train "$TRAIN" --eval "$EVAL" --heldout "$HELDOUT" \
    --train-lengths 8K 16K 32K 128K --eval-lengths 8K 32K --heldout-lengths "${LENGTHS[@]}" \
    --heldout-unseen "$UNSEEN" --heldout-unseen-lengths "${LENGTHS[@]}" --no-progress > "$D/logs/data.log" 2>&1
  keep "$D/data/build.json"
  sha256sum "$D/data/heldout.jsonl" "$D/data/heldout_unseen.jsonl" | tee "$D/keep/data.sha256"
}
stage_settings() { # what this run resolved, into the progress log
  log "settings: model=$MODEL scale=${PROOF_SCALE:-full} sft: lora=$SFT_LORA (r=$SFT_LORA_R) tasks=$SFT_TASKS ($SFT_TASK_SOURCE) epochs=$SFT_EPOCHS batch=$SFT_BATCH x$SFT_ACCUM lr=$SFT_LR entropy_floor=$SFT_ENTROPY_FLOOR min_epochs=$SFT_MIN_EPOCHS teacher_slips=$SFT_TEACHER_SLIPS reader_ratio=$SFT_READER_RATIO reader_batches=$SFT_READER_BATCHES;" \
    "grpo: runs=$GRPO_RUNS micro=$MICRO accum=$ACCUM lr=$GRPO_LR lr_b=$GRPO_LR_B gpu_share=$GRPO_GPU_SHARE subcall_rows=$SUBCALL_ROWS subcall_checkpointing=$SUBCALL_CHECKPOINTING; rollout: turns=$TURNS new=$NEW total=$TOTAL sub_input=$SUB_INPUT;" \
    "eval_splits=$EVAL_SPLITS eval_repetition_penalty=$EVAL_REP_PENALTY sft_eval_repetition_penalty=${SFT_EVAL_REP_PENALTY:-none};" "eval_reader=$EVAL_READER$([ "$TRAINED_READER" = 1 ] && echo " (reader sft: ratio $READER_SFT_RATIO x$READER_SFT_EPOCHS lr $READER_SFT_LR)"); grpo_reader=$GRPO_READER;" "baselines=$BASELINES; teacher_reader=$TEACHER_READER; grpo_finals=$GRPO_FINALS;" \
    "budget=${BUDGET_S}s final_reserve=${FINAL_RESERVE_S}s"
  # what `bring` packs as this run's settings: read here, where the run starts, not from the bring call's
  # environment; a run directory keeps the settings it began with (its done stages were made with them)
  if [ -f "$D/settings.record" ]; then
    # the GRPO lines bind only GRPO's own stages: until one of them has begun, they are this start's to set
    local grpo_bound=1
    if grpo_not_begun; then grpo_bound=0; fi
    settings_agree "$D/settings.record" "$grpo_bound" >&2 \
      || die "$D ran with other settings (>) than these (<): use a fresh PROOF_DIR, or the run's own PROOF_* settings"
    if ! cmp -s <(settings_record) "$D/settings.record"; then
      log "settings: no GRPO has begun here, so its settings are this start's: $(settings_record | grep ^grpo | tr '\n' ';')"
    fi
  fi
  settings_record > "$D/settings.record"
}
settings_agree() { # RECORDED GRPO_BOUND: this start's settings match the file RECORDED (the GRPO lines too with
  # GRPO_BOUND=1); where they differ, it prints the diff (<: these, >: RECORDED)
  local only=cat
  [ "$2" = 1 ] || only="grep -v ^grpo"
  diff <(settings_record | $only) <($only < "$1")
}
grpo_not_begun() { # no GRPO stage done or begun in $D: no done mark, no checkpoint, no metrics
  local r
  for r in grpo grpo_masked grpo_b final final_br final_tr final_masked final_b; do [ ! -f "$D/done/$r" ] || return 1; done
  for r in grpo grpo-masked grpo-b; do [ ! -e "$D/$r/metrics.jsonl" ] && [ -z "$(newest_checkpoint "$D/$r")" ] || return 1; done
}
stage_model() { # the student's weights, built once before stages load them side by side
  if [ -n "$QWEN_SIZE" ] && [ -d /root/qparts ]; then bash scripts/gpu/stage_qwen.sh join "$QWEN_SIZE"; fi
  "$PY" -c "from fathom.models import resolve_model_dir; print(resolve_model_dir('$MODEL'))"
}
stage_sft() { # full fine-tune (or LoRA) on the teacher's grounded, correct transcripts (and reader rows) whose
  # every turn fits the NEW tokens a turn that GRPO and the evaluations give the student
  fathom sft --config "$RECIPE" --run.run_dir="$D/sft" --run.device="$DEVICE" --model.name="$MODEL" \
    "${SFT_MODEL_ARGS[@]}" --data.train_tasks="$SFT_POOL" --curriculum.tiers="$ALL_TIER" --eval.tier=0 \
    --sft.num_tasks="$SFT_TASKS" --sft.epochs="$SFT_EPOCHS" --sft.learning_rate="$SFT_LR" --sft.max_turns="$TURNS" \
    --sft.max_length="$TOTAL" --sft.per_device_train_batch_size="$SFT_BATCH" --sft.gradient_accumulation_steps="$SFT_ACCUM" \
    --rollout.max_new_tokens="$NEW" --rollout.sub_max_new_tokens=128 --rollout.sub_max_input_tokens="$SUB_INPUT" \
    --sft.reader_echo="${PROOF_SFT_READER_ECHO:-0.25}" \
    --sft.teacher_slips="$SFT_TEACHER_SLIPS" --sft.reader_ratio="$SFT_READER_RATIO" --sft.reader_batches="$SFT_READER_BATCHES" \
    --sft.holdout=0.1 --sft.eval_every="$SFT_EVAL_EVERY" --sft.patience=2 --sft.entropy_floor="$SFT_ENTROPY_FLOOR" --sft.min_epochs="$SFT_MIN_EPOCHS" \
    --logging.progress=false > "$D/logs/sft.log" 2>&1
  keep "$D/sft/summary.json" "$D/sft/metrics.jsonl"
}
stage_direct() { evaluate direct direct "$MODEL" "direct, truncated (untrained)"; }
stage_untrained() { evaluate rlm-untrained rlm "$MODEL" "rlm (untrained)"; }
stage_baselines() { stage_direct & stage_untrained & wait; }
stage_teacher_br() { evaluate teacher-br teacher "$MODEL" "teacher, untrained reader" "$EVAL_REP_PENALTY" "$MODEL"; }
stage_sft_eval() { evaluate rlm-sft rlm "$SFT_MODEL" "rlm (SFT)"; }
stage_sft_eval_rp() {
  evaluate rlm-sft-rp rlm "$SFT_MODEL" "rlm (SFT, repetition penalty $SFT_EVAL_REP_PENALTY)" "$SFT_EVAL_REP_PENALTY"
}
newest_checkpoint() { # RUN_DIR: the name of its newest checkpoint, or nothing
  [ -d "$1" ] || return 0
  find "$1" -maxdepth 1 -type d -name 'checkpoint-*' -printf '%f\n' | sort -t- -k2 -n | tail -n 1
}
grpo_run() { # DIR TRAIN_SUBCALLS MINUTES PORT [ARGS]: LoRA GRPO on the SFT model (a fresh adapter) or, with
  # PROOF_SFT_LORA=1, continuing the SFT adapter; resumes from DIR's newest checkpoint.
  # PORT: TRL's colocated vLLM opens a torch.distributed store, one port per run on the machine
  export MASTER_PORT=$4
  local init=$SFT_MODEL train_subcalls=$2 sub_lm=policy
  local reader=()
  if [ "$GRPO_READER" = base ]; then train_subcalls=false sub_lm=base; fi
  if [ "$GRPO_READER" = trained ]; then train_subcalls=false sub_lm=model reader=(--rollout.sub_lm_model="$D/reader/final/merged"); fi
  if [ "$SFT_LORA" = 1 ]; then
    init=$D/sft/final/adapter
    # after `restore` the SFT adapter is not here (it does not come back): the carried checkpoint's adapter is
    # the same adapter, so it gives the model its shape, and the resume then loads its weights
    local carried; carried=$(newest_checkpoint "$D/$1")
    if [ ! -d "$init" ] && [ -n "$carried" ]; then init=$D/$1/$carried; fi
  fi
  fathom grpo --config "$RECIPE" --run.run_dir="$D/$1" --run.device="$DEVICE" --model.name="$MODEL" \
    --run.seed="$GRPO_SEED" --model.init_from="$init" --data.train_tasks="$D/data/train.jsonl" \
    --data.eval_tasks="$D/data/eval.jsonl" --run.max_minutes="$3" --grpo.max_steps=1000 \
    --grpo.per_device_train_batch_size="$MICRO" --grpo.gradient_accumulation_steps="$ACCUM" \
    --grpo.num_generations=8 --grpo.dynamic_sampling=true --grpo.oversample=2 --grpo.log_kl="$LOG_KL" \
    --grpo.learning_rate="$GRPO_LR" --grpo.warmup_steps=5 --eval.every=0 --checkpoint.save_every=10 \
    --logging.progress=false --curriculum.min_dwell_steps=15 --rollout.generation_mode="$GEN_MODE" \
    --model.dtype=bfloat16 --rollout.max_turns="$TURNS" --rollout.max_new_tokens="$NEW" \
    --rollout.max_total_tokens="$TOTAL" --rollout.vllm_max_model_len="$TOTAL" --rollout.sub_max_new_tokens=128 \
    --rollout.sub_max_input_tokens="$SUB_INPUT" \
    --rollout.vllm_gpu_memory_utilization="$MEM" --rollout.vllm_kv_cache_gib="$KV_GIB" \
    --rollout.train_subcalls="$train_subcalls" --rollout.sub_lm="$sub_lm" "${reader[@]}" \
    --run.gpu_memory_fraction="$GRPO_GPU_SHARE" ${5:-} ${GRPO_ARGS:-} \
    > "$D/logs/$1.log" 2>&1
  keep "$D/$1/summary.json" "$D/$1/metrics.jsonl" "$D/$1/config.toml"
  { head -n 32 "$D/$1/traces.jsonl"; tail -n 64 "$D/$1/traces.jsonl"; } > "$D/$1/traces_sample.jsonl"
  keep "$D/$1/traces_sample.jsonl"
}
grpo_minutes() { # what is left of the budget, less the final evaluations and the run's start and export
  local left=$(( ${PROOF_DEADLINE:-$(( $(date +%s) + BUDGET_S ))} - $(date +%s) - FINAL_RESERVE_S - 150 ))
  [ "$left" -gt 60 ] || left=60
  awk "BEGIN { printf \"%.1f\", $left / 60 }"
}
# the sub-call rows widen the loss's micro-batches (run 3: 88.8 GiB at 16 sub-call rows a step, beside the
# masked run): at most SUBCALL_ROWS a step
stage_grpo() {
  grpo_run grpo true "$(grpo_minutes)" 29517 "--rollout.max_subcall_rows=$SUBCALL_ROWS --model.gradient_checkpointing=$SUBCALL_CHECKPOINTING"
}
stage_grpo_masked() { grpo_run grpo-masked false "$(grpo_minutes)" 29527; }
stage_grpo_b() {
  grpo_run grpo-b true "$(grpo_minutes)" 29537 "--rollout.max_subcall_rows=$SUBCALL_ROWS --model.gradient_checkpointing=$SUBCALL_CHECKPOINTING --grpo.learning_rate=$GRPO_LR_B"
}
stage_sft_eval_br() { evaluate rlm-sft-br rlm "$SFT_MODEL" "rlm (SFT, untrained reader)" "$EVAL_REP_PENALTY" "$MODEL"; }
stage_reader_sft() { # the reader trained apart (PROOF_EVAL_READER=trained or all): a LoRA on the base model,
  # trained on the reader calls SFT recorded (its transcripts, with the same turn budget, only size the draw); after
  # `restore` those files stayed behind, so the teacher plays SFT's tasks again (the same seed, the same tasks)
  local calls=(--sft.source=file --sft.transcripts="$D/sft/transcripts.jsonl" --sft.reader_calls="$D/sft/reader_calls.jsonl")
  if [ ! -f "$D/sft/reader_calls.jsonl" ]; then
    calls=(--sft.source=teacher --data.train_tasks="$SFT_POOL" --curriculum.tiers="$ALL_TIER" --eval.tier=0
      --sft.num_tasks="$SFT_TASKS" --sft.reader_echo="${PROOF_SFT_READER_ECHO:-0.25}")
  fi
  fathom sft --config "$RECIPE" --run.run_dir="$D/reader" --run.device="$DEVICE" --model.name="$MODEL" \
    --model.lora=true --model.lora_r="$SFT_LORA_R" --model.lora_alpha="$SFT_LORA_ALPHA" "${calls[@]}" \
    --sft.rows=reader --sft.reader_ratio="$READER_SFT_RATIO" --sft.epochs="$READER_SFT_EPOCHS" \
    --sft.learning_rate="$READER_SFT_LR" --sft.max_turns="$TURNS" --sft.max_length="$TOTAL" \
    --sft.per_device_train_batch_size="$SFT_BATCH" --sft.gradient_accumulation_steps="$SFT_ACCUM" \
    --rollout.max_new_tokens="$NEW" --rollout.sub_max_new_tokens=128 --rollout.sub_max_input_tokens="$SUB_INPUT" \
    --logging.progress=false > "$D/logs/reader_sft.log" 2>&1
  keep "$D/reader/summary.json" "$D/reader/metrics.jsonl"
}
stage_sft_merge() { # after `restore` the SFT adapter came back but not its merged model, which the evaluations load
  if [ "$SFT_LORA" != 1 ] || [ -d "$SFT_MODEL" ]; then return 0; fi
  rm -rf "$SFT_MODEL.tmp"
  "$PY" -c 'import sys, torch
from pathlib import Path
from fathom.models import ModelSpec, load_tokenizer
from fathom.train.checkpoint import merge_adapter
adapter, base, out = sys.argv[1:]
merge_adapter(Path(adapter), base, torch.bfloat16, load_tokenizer(ModelSpec(name=base)), Path(out))' \
    "$D/sft/final/adapter" "$MODEL" "$SFT_MODEL.tmp" > "$D/logs/sft_merge.log" 2>&1
  mv "$SFT_MODEL.tmp" "$SFT_MODEL"
}
stage_sft_eval_tr() {
  evaluate rlm-sft-tr rlm "$SFT_MODEL" "rlm (SFT, reader trained apart)" "$EVAL_REP_PENALTY" "$D/reader/final/merged"
}
case $GRPO_READER in
  base) GRPO_LABEL="untrained reader in training" ;;
  trained) GRPO_LABEL="reader trained apart in training" ;;
  *) GRPO_LABEL="sub-calls trained" ;;
esac
stage_final() { evaluate rlm-grpo rlm "$D/grpo/final/merged" "rlm (SFT+GRPO, $GRPO_LABEL)"; }
stage_final_br() {
  evaluate rlm-grpo-br rlm "$D/grpo/final/merged" "rlm (SFT+GRPO, untrained reader)" "$EVAL_REP_PENALTY" "$MODEL"
}
stage_final_tr() {
  evaluate rlm-grpo-tr rlm "$D/grpo/final/merged" "rlm (SFT+GRPO, reader trained apart)" "$EVAL_REP_PENALTY" \
    "$D/reader/final/merged"
}
final_step() { # STAGE: a GRPO run's evaluation, unless PROOF_GRPO_FINALS=skip leaves it to a later lease
  if [ "$GRPO_FINALS" = skip ]; then log "stage $1 skipped (PROOF_GRPO_FINALS=skip)"; else step "$1"; fi
}
finals() { # the trained GRPO run's evaluations: with its own reader and, with PROOF_EVAL_READER=both, the untrained
  # one's (PROOF_GRPO_READER=trained: the reader trained apart's)
  local other=
  if [ "$GRPO_READER" = trained ]; then other=final_tr; elif [ "$UNTRAINED_READER" = 1 ]; then other=final_br; fi
  if [ "$GRPO_FINALS" = skip ] || [ -z "$other" ]; then final_step final; return; fi
  step "$other" & local pid=$!
  step final || { wait "$pid"; return 1; }
  wait "$pid"
}
reader_then_grpo() { # PROOF_GRPO_READER=trained: the reader first; then its SFT evaluation beside GRPO
  step reader_sft || return 1
  step sft_eval_tr & local tr=$!
  local status=0
  { step grpo && finals; } || status=1
  wait "$tr" || status=1
  return $status
}
stage_final_masked() { evaluate rlm-grpo-masked rlm "$D/grpo-masked/final/merged" "rlm (SFT+GRPO, sub-calls masked)"; }
stage_final_b() { evaluate rlm-grpo-b rlm "$D/grpo-b/final/merged" "rlm (SFT+GRPO, sub-calls trained, lr $GRPO_LR_B)"; }
stage_report() { # the trained-sub-calls run's report (the masked run's if that one did not finish)
  local run="$D/grpo"
  [ -f "$run/summary.json" ] || run="$D/grpo-masked"
  mkdir -p "$run/evals"
  for e in "$D"/eval/*/; do ln -sfn "$e" "$run/evals/$(basename "$e")"; done
  fathom report "$run" --out "$D/report" > "$D/logs/report.log" 2>&1
  keep "$D"/report/*.png
  return 0
}
stage_pack() { # one archive of everything kept (the device returns at most 8 files of 16 MiB)
  cp "$D/progress.log" "$D/keep/" 2>/dev/null || true
  tar -czf "$D/proof.tgz" -C "$D" keep logs
  ls -la "$D/proof.tgz"
}
settings_record() { # what a carried run must match when it continues (not the budget or the GPU's shares)
  printf '%s\n' "model=$MODEL" "scale=${PROOF_SCALE:-full}" "device=$DEVICE" "sft_lora=$SFT_LORA" \
    "sft_lora_r=$SFT_LORA_R" "sft_lora_alpha=$SFT_LORA_ALPHA" "sft=$SFT_TASKS x$SFT_EPOCHS batch $SFT_BATCH x$SFT_ACCUM lr $SFT_LR slips $SFT_TEACHER_SLIPS" \
    "grpo=micro $MICRO accum $ACCUM lr $GRPO_LR seed $GRPO_SEED subcall_rows $SUBCALL_ROWS reader $GRPO_READER" \
    "rollout=turns $TURNS new $NEW total $TOTAL sub_input $SUB_INPUT mode $GEN_MODE" "grpo_args=${GRPO_ARGS:-}"
}
die() { echo "proof.sh: $*" >&2; exit 1; }
CARRIED_STAGES=(data baselines sft sft_eval)  # what `restore` marks done (the model is rebuilt by its stage)
bring_pack() { # $D/bring: the state a later session continues GRPO from, one tar in pieces with a manifest
  local rec=$D/settings.record
  [ -f "$rec" ] || die "no settings recorded in $D: bring packs a run that proof.sh pipeline or restore began"
  grep -qx sft_lora=1 "$rec" \
    || die "bring needs a run with PROOF_SFT_LORA=1: a full fine-tune's weights, under the GRPO adapter, cannot come back"
  [ -f "$D/done/sft" ] || die "no finished SFT stage in $D: nothing to continue"
  # a restored run has no SFT adapter (it stays behind), but carried its settings
  [ -d "$D/sft/final/adapter" ] || [ -f "$D/carry-meta/settings" ] \
    || die "no SFT adapter in $D/sft/final: this run's SFT was a full fine-tune"
  local files=(keep carry-meta sft/summary.json sft/metrics.jsonl) runs=() r c e f
  for r in grpo grpo-masked; do
    c=$(newest_checkpoint "$D/$r")
    [ -n "$c" ] || continue
    runs+=("$r/$c")
    files+=("$r/$c")
    for f in metrics.jsonl config.toml; do [ -f "$D/$r/$f" ] && files+=("$r/$f"); done
  done
  if [ ${#runs[@]} -eq 0 ]; then  # SFT alone (PROOF_GRPO_RUNS=none): its adapter, which GRPO starts from
    [ -d "$D/sft/final/adapter" ] || die "no GRPO checkpoint in $D/grpo or $D/grpo-masked, and no SFT adapter"
    runs=(sft/final/adapter) files+=(sft/final/adapter)
  fi
  for e in direct rlm-untrained rlm-sft; do
    for f in "$D/eval/$e"{,-unseen}/{summary.json,eval.jsonl,traces_sample.jsonl}; do
      [ -f "$f" ] && files+=("${f#"$D"/}")
    done
  done
  rm -rf "$D/bring" "$D/carry-meta" && mkdir -p "$D/bring" "$D/carry-meta"
  cp "$rec" "$D/carry-meta/settings"
  (cd "$D/data" && sha256sum ./*.jsonl) > "$D/carry-meta/data.sha256"
  ls "$D/done" > "$D/carry-meta/done"
  printf '%s\n' "${runs[@]}" > "$D/carry-meta/checkpoints"
  cp "$D/progress.log" "$D/keep/"
  tar -czf "$D/bring/carry.tgz" -C "$D" --exclude=optimizer.pt "${files[@]}"
  bash scripts/gpu/carry_pieces.sh split "$D/bring/carry.tgz" "$BRING_PIECE" "$D/bring/pieces"
  log "bring: packed ${runs[*]} ($(stat -c %s "$D/bring/carry.tgz") bytes)"
}
bring_call() { # N: the manifest and the N-th call's pieces into $OUT
  local m=$D/bring/pieces/manifest.sha256 names n=$1 calls i
  [ -f "$m" ] || die "nothing packed in $D/bring: run proof.sh bring first"
  [ -n "${OUT:-}" ] || die "OUT is not set: the device call's output folder"
  mapfile -t names < <(tail -n +2 "$m" | awk '{print $2}')
  calls=$(( (${#names[@]} + BRING_PER_CALL - 1) / BRING_PER_CALL ))
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le "$calls" ] || die "bring CALL must be 1..$calls, got '$n'"
  cp "$m" "$OUT/"
  for ((i = (n - 1) * BRING_PER_CALL; i < n * BRING_PER_CALL && i < ${#names[@]}; i++)); do
    cp "$D/bring/pieces/${names[i]}" "$OUT/"
  done
  echo "bring: call $n of $calls returns the manifest and pieces $(( (n - 1) * BRING_PER_CALL + 1 ))-$i of ${#names[@]}"
  [ "$n" -eq "$calls" ] || echo "next: bash scripts/gpu/proof.sh bring $((n + 1))"
}
stage_restore() { # this call's carried pieces (.cb*/); once all are here: join, check, unpack, rebuild the data
  local in=$D/carry-in m f lost s r
  mkdir -p "$in"
  for m in .cb*/manifest.sha256; do
    [ -f "$m" ] || continue
    if [ -f "$in/manifest.sha256" ] && ! cmp -s "$m" "$in/manifest.sha256"; then
      die "$m is another pack's manifest than the one already in $in"
    fi
    cp "$m" "$in/"
  done
  for f in .cb*/carry.tgz.[0-9]*; do if [ -f "$f" ]; then cp "$f" "$in/"; fi; done
  [ -f "$in/manifest.sha256" ] || die "no manifest.sha256 carried: carry the .cbN folders that prepare_carry_back.sh wrote"
  lost=$(bash scripts/gpu/carry_pieces.sh missing "$in")
  if [ -n "$lost" ]; then log "restore: $(echo "$lost" | wc -l) pieces still to come ($(echo "$lost" | tr '\n' ' '))"; return 0; fi
  for r in grpo grpo-masked; do
    [ -z "$(newest_checkpoint "$D/$r")" ] || die "$D/$r already holds a checkpoint: restore into a fresh PROOF_DIR"
  done
  bash scripts/gpu/carry_pieces.sh join "$in" "$in/carry.tgz"
  # a carried SFT adapter alone (no GRPO ran) binds what made it, not the GRPO that is yet to start from it
  local grpo_bound=1
  if [ "$(tar -xzOf "$in/carry.tgz" carry-meta/checkpoints)" = sft/final/adapter ]; then grpo_bound=0; fi
  settings_agree <(tar -xzOf "$in/carry.tgz" carry-meta/settings) "$grpo_bound" \
    || die "these settings (<) are not the carried run's (>): run restore and start with the carried run's PROOF_* settings"
  tar -xzf "$in/carry.tgz" -C "$D" && rm -f "$in/carry.tgz"
  settings_record > "$D/settings.record"  # the carried run's, but for the GRPO lines of one that is yet to start
  cat "$D/keep/progress.log" "$D/progress.log" > "$D/progress.log.new" 2>/dev/null || true
  mv "$D/progress.log.new" "$D/progress.log"  # one log across the sessions
  # deterministic (seed 8): the same tasks, which the sha256 below proves
  bash scripts/gpu/proof.sh data || die "rebuilding the data failed (log: $D/logs/data.log)"
  (cd "$D/data" && sha256sum -c --quiet "$D/carry-meta/data.sha256") || die "the rebuilt data differ from the carried run's"
  grep -qx sft "$D/carry-meta/done" || die "the carried run has no finished SFT stage"
  mkdir -p "$D/done"
  for s in "${CARRIED_STAGES[@]}"; do if grep -qx "$s" "$D/carry-meta/done"; then touch "$D/done/$s"; fi; done
  log "restore: $(tr '\n' ' ' < "$D/carry-meta/checkpoints")carried; done: $(ls "$D/done" | tr '\n' ' ')"
}

# A stage of the pipeline runs as its own invocation of this script, so that `set -e` holds inside it (bash
# ignores errexit in functions called from `&&`, `||` or `if`), and its status is what the pipeline sees.
step() { # a stage already done on this machine ($D/done/STAGE) is skipped: `start` again resumes the pipeline
  if [ -f "$D/done/$1" ] && [ "$1" != report ] && [ "$1" != pack ]; then log "stage $1 already done"; return 0; fi
  local t; t=$(date +%s); log "stage $1 start"
  if bash scripts/gpu/proof.sh "$1"; then log "stage $1 done in $(($(date +%s) - t)) s"; mkdir -p "$D/done"; touch "$D/done/$1"
  else log "stage $1 FAILED after $(($(date +%s) - t)) s (log: $D/logs)"; return 1; fi
}
stage_pipeline() {
  export PROOF_DEADLINE=${PROOF_DEADLINE:-$(( $(date +%s) + BUDGET_S ))}
  stage_settings
  step data & local data=$!
  step model || { wait; return 1; }
  wait "$data" || return 1
  local baselines=
  if [ "$BASELINES" = run ]; then step baselines & baselines=$!
  else log "stage baselines skipped (PROOF_BASELINES=skip)"; fi
  local teacher_br=
  if [ "$TEACHER_READER" = base ]; then step teacher_br & teacher_br=$!; fi
  step sft || { wait; step pack; return 1; }
  # the SFT model's evaluations load its merged weights; GRPO after `restore` needs only the adapter
  if [ ! -f "$D/done/sft_eval" ] || [ -n "$SFT_EVAL_REP_PENALTY" ] || [ "$UNTRAINED_READER$TRAINED_READER" != 00 ]; then
    step sft_merge || { wait; step pack; return 1; }
  fi
  step sft_eval & local sft_eval=$!
  local sft_eval_rp=
  if [ -n "$SFT_EVAL_REP_PENALTY" ]; then step sft_eval_rp & sft_eval_rp=$!; fi
  local sft_eval_br=
  if [ "$UNTRAINED_READER" = 1 ]; then step sft_eval_br & sft_eval_br=$!; fi
  local sft_eval_tr=
  if [ "$TRAINED_READER" = 1 ] && [ "$GRPO_READER" != trained ]; then
    { step reader_sft && step sft_eval_tr; } & sft_eval_tr=$!
  fi
  local trained=
  if [ "$GRPO_RUNS" = none ]; then log "stage grpo skipped (PROOF_GRPO_RUNS=none)"
  elif [ "$GRPO_READER" = trained ]; then reader_then_grpo & trained=$!
  else { step grpo && finals; } & trained=$!; fi
  local second=
  case $GRPO_RUNS in
    both) { step grpo_masked && final_step final_masked; } & second=$! ;;
    lr-pair) { step grpo_b && final_step final_b; } & second=$! ;;
  esac
  local status=0
  for pid in $baselines $teacher_br $sft_eval $sft_eval_rp $sft_eval_br $sft_eval_tr $trained $second; do wait "$pid" || status=1; done
  if [ "$GRPO_RUNS" != none ] && [ "$GRPO_FINALS" = run ]; then step report || status=1; fi
  step pack
  return $status
}

[ $# -gt 0 ] || { echo "usage: $0 STAGE... | start | wait SECONDS | bring [CALL] | restore" >&2; exit 2; }
mkdir -p "$D/logs" "$D/keep"
case $1 in
  start)  # from a copy of the tree: each device call replaces the working tree the pipeline would read
    rm -f "$D/pipeline.done"
    export PROOF_DEADLINE=$(( $(date +%s) + BUDGET_S ))
    SRC=${PROOF_SRC:-/root/proof-src}
    rm -rf "$SRC" && mkdir -p "$SRC" && cp -r src scripts configs bench "$SRC/"
    setsid bash -c "cd '$SRC' && bash scripts/gpu/proof.sh pipeline > '$D/pipeline.log' 2>&1; echo \$? > '$D/pipeline.done'" < /dev/null &
    log "pipeline started (pid $!), deadline $(date -d "@$PROOF_DEADLINE" +%H:%M:%S)"
    exit 0 ;;
  wait)
    end=$(( $(date +%s) + ${2:?wait SECONDS} ))
    while [ "$(date +%s)" -lt "$end" ] && [ ! -f "$D/pipeline.done" ]; do sleep 10; done
    tail -n 40 "$D/progress.log"
    for g in grpo grpo-masked grpo-b; do
      [ -f "$D/$g/metrics.jsonl" ] && "$PY" scripts/gpu/grpo_progress.py "$D/$g/metrics.jsonl" "$g"
    done
    if [ -f "$D/pipeline.done" ]; then
      echo "pipeline ended, status $(cat "$D/pipeline.done")"; tail -n 20 "$D/pipeline.log"
      [ -n "${OUT:-}" ] && cp "$D/proof.tgz" "$OUT/"
    fi
    exit 0 ;;
  bring)  # bring: pack, and the first call's pieces; bring N: the N-th call's
    if [ $# -eq 1 ]; then bring_pack; bring_call 1; else bring_call "$2"; fi
    exit 0 ;;
esac
for stage in "$@"; do "stage_$stage"; done
