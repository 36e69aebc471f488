#!/usr/bin/env bash
# Here (not on the GPU machine): what `proof.sh bring` returned, as carry folders for a later session.
#   scripts/gpu/prepare_carry_back.sh DIR...   DIR: where one bring call's files lie (the call's files_at)
# Gathers the pieces and the manifest (every call's manifest must be the same pack's), joins them, checking
# every piece and the whole against the manifest (a missing or damaged piece stops here, not on the device),
# and cuts the whole again into carry-sized parts. Writes:
# into the repository root (or CARRY_OUT):
#   .cb1 .cb2 ...   one part each (CAP bytes at most) and the parts' manifest (same whole sha256)
#   .cbplan         the device calls, in order, after the session's staging calls (scripts/gpu/prepare_carry*.sh)
# It does not look inside the pack: `proof.sh restore` on the GPU machine checks the settings and the data.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUTDIR=${CARRY_OUT:-$ROOT}
CAP=${CAP:-$(bash "$ROOT/scripts/gpu/carry_pieces.sh" cap)}  # bytes of payload a call, beside the working tree
[ $# -gt 0 ] || { echo "usage: prepare_carry_back.sh DIR... (the folders the bring calls returned)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/in"
for dir in "$@"; do
  [ -f "$dir/manifest.sha256" ] || { echo "no manifest.sha256 in $dir: not a bring call's files" >&2; exit 1; }
  if [ -f "$tmp/in/manifest.sha256" ] && ! cmp -s "$dir/manifest.sha256" "$tmp/in/manifest.sha256"; then
    echo "$dir/manifest.sha256 belongs to another pack than $1's" >&2; exit 1
  fi
  cp "$dir/manifest.sha256" "$tmp/in/"
  for f in "$dir"/carry.tgz.[0-9]*; do if [ -f "$f" ]; then cp "$f" "$tmp/in/"; fi; done
done
bash "$ROOT/scripts/gpu/carry_pieces.sh" join "$tmp/in" "$tmp/carry.tgz"
bash "$ROOT/scripts/gpu/carry_pieces.sh" split "$tmp/carry.tgz" "$CAP" "$tmp/out"
mkdir -p "$OUTDIR" && cd "$OUTDIR"
rm -rf .cb[0-9]* .cbplan
mapfile -t parts < <(tail -n +2 "$tmp/out/manifest.sha256" | awk '{print $2}')
for i in "${!parts[@]}"; do
  mkdir -p ".cb$((i + 1))" && cp "$tmp/out/${parts[i]}" "$tmp/out/manifest.sha256" ".cb$((i + 1))/"
done
{
  echo "# device calls that carry a proof run's GRPO state back in (pack sha256 $(head -n 1 "$tmp/out/manifest.sha256" | awk '{print $1}')),"
  echo "# after this session's staging calls, each with the carried run's settings:"
  tar -xzOf "$tmp/carry.tgz" carry-meta/settings | sed 's/^/#   /'
  for i in "${!parts[@]}"; do
    last=$([ "$i" -eq $((${#parts[@]} - 1)) ] && echo " && bash scripts/gpu/proof.sh start" || true)
    echo "carry [\".cb$((i + 1))\"]:  bash scripts/gpu/proof.sh restore$last"
  done
} > .cbplan
cat .cbplan
du -sb .cb[0-9]*
