#!/usr/bin/env bash
# The teacher's moves with the untrained model reading its llm() calls (`teacher-br`, as GPU proof run 20), once
# per chunk size its reading cells cut, side by side on one GPU: does the untrained reader answer better when
# it is handed less at a time? On GPU proof run 20's held-out files (data seed 8; `keep/data.sha256`).
#
#   bash scripts/gpu/teacher_chunks.sh start          after `stage_qwen.sh join` (GPU) or with CHUNKS_DEVICE=cpu
#   bash scripts/gpu/teacher_chunks.sh wait SECONDS   until done or SECONDS; then $OUT/chunks.tgz (keep/)
#
# CHUNKS_SIZES (default "7680 3840 1920": 7,680 is the teacher's own size, so run 20's row is measured again in
# the same run), CHUNKS_MODEL (default qwen2.5-coder-1.5b), CHUNKS_DIR (default /root/chunks), CHUNKS_LIMIT
# (tasks per file; default all), CHUNKS_SPLITS=unseen (that file alone), CHUNKS_SCALE=tiny (a CPU rehearsal:
# proof.sh's tiny held-out files). Each size is one `fathom eval --policy teacher --reader-model` process with its own
# vLLM engine (0.1 of the GPU).
set -euo pipefail
PY=${PY:-python3}
D=${CHUNKS_DIR:-/root/chunks}
MODEL=${CHUNKS_MODEL:-qwen2.5-coder-1.5b}
DEVICE=${CHUNKS_DEVICE:-cuda}
SIZES=${CHUNKS_SIZES:-7680 3840 1920}
if [ "$DEVICE" != cpu ]; then source scripts/gpu/env.sh; fi
if [ "$DEVICE" = cpu ]; then MODE=plain DTYPE=float32; else MODE=vllm DTYPE=bfloat16; fi
LIMIT=()
[ -n "${CHUNKS_LIMIT:-}" ] && LIMIT=(--limit "$CHUNKS_LIMIT")
SPLITS=("" -unseen)  # CHUNKS_SPLITS=unseen: the unseen families' file alone (a shorter lease)
case ${CHUNKS_SPLITS:-both} in
  both) ;;
  unseen) SPLITS=(-unseen) ;;
  *) echo "CHUNKS_SPLITS must be both or unseen" >&2; exit 2 ;;
esac
mkdir -p "$D/logs" "$D/keep"
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$D/progress.log"; }

run() {
  # the GPU proof's own data stage, so the held-out files are run 20's bytes (its keep/data.sha256 says so)
  log "data"
  PROOF_DIR="$D" PROOF_DEVICE="$DEVICE" PROOF_SCALE="${CHUNKS_SCALE:-full}" PY="$PY" bash scripts/gpu/proof.sh data
  local pids=() size status=0 split files outs
  for size in $SIZES; do
    files=() outs=()
    for split in "${SPLITS[@]}"; do
      files+=("$D/data/heldout${split/-/_}.jsonl") outs+=("$D/eval/c$size$split")
    done
    log "teacher-br, chunks of $size characters"
    "$PY" -m fathom eval --policy teacher --model "$MODEL" --reader-model "$MODEL" --teacher-chunk-chars "$size" \
      --label "teacher, untrained reader, $size-char chunks" --tasks "${files[@]}" --out "${outs[@]}" "${LIMIT[@]}" \
      --device "$DEVICE" --batch-size 120 --generation-mode "$MODE" --dtype "$DTYPE" --vllm-memory 0.1 \
      --vllm-kv-cache-gib 6 --overwrite --no-progress > "$D/logs/eval-c$size.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  for size in $SIZES; do
    for split in "${SPLITS[@]}"; do
      out=$D/eval/c$size$split
      cp "$out/summary.json" "$D/keep/$(basename "$out")_summary.json"
      cp "$out/eval.jsonl" "$D/keep/$(basename "$out")_eval.jsonl"
      head -n 24 "$out/traces.jsonl" > "$D/keep/$(basename "$out")_traces_sample.jsonl"
    done
  done
  log "done, status $status"
  return $status
}

case ${1:-} in
  start)  # from a copy of the tree: each device call replaces the working tree
    rm -f "$D/done"
    SRC=${CHUNKS_SRC:-$D-src}
    rm -rf "$SRC" && mkdir -p "$SRC" && cp -r src scripts configs "$SRC/"
    setsid bash -c "cd '$SRC' && bash scripts/gpu/teacher_chunks.sh run > '$D/run.log' 2>&1; echo \$? > '$D/done'" < /dev/null &
    log "started (pid $!)"
    ;;
  run) run ;;
  wait)
    end=$(( $(date +%s) + ${2:?wait SECONDS} ))
    while [ "$(date +%s)" -lt "$end" ] && [ ! -f "$D/done" ]; do sleep 5; done
    tail -n 20 "$D/progress.log"
    if [ -f "$D/done" ]; then
      echo "status $(cat "$D/done")"
      tail -n 5 "$D"/logs/eval-c*.log
      tar -czf "${OUT:-$D}/chunks.tgz" -C "$D" keep progress.log logs
    fi
    ;;
  *) echo "usage: $0 start | wait SECONDS" >&2; exit 2 ;;
esac
