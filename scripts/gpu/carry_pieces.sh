#!/usr/bin/env bash
# One file in numbered pieces with a manifest, and back, refusing any damage. The device returns at most 8
# files of 16 MiB a call and carries at most 64 MiB in, so a proof run's state crosses in pieces both ways
# (`proof.sh bring`, scripts/gpu/prepare_carry_back.sh, `proof.sh restore`).
#   carry_pieces.sh split FILE BYTES DIR   DIR/NAME.000, NAME.001 ... (BYTES each, the last one shorter) and
#                                          DIR/manifest.sha256: the whole file's sha256 first, then each piece's
#                                          (sha256sum's format, NAME = FILE's name)
#   carry_pieces.sh missing DIR            the pieces DIR's manifest names that DIR lacks, one a line
#   carry_pieces.sh cap                    the bytes a call may carry beside the working tree: 64 MiB less the
#                                          files that travel with every call (tracked, and untracked but not
#                                          ignored) less a 2 MiB margin for the tree's growth between sessions
#   carry_pieces.sh join DIR OUT           every piece checked against the manifest, joined in order into OUT,
#                                          OUT checked against the whole's sha256; a missing or damaged piece
#                                          is an error that names it, and OUT is not left behind
# It does not choose the sizes (the callers do) or look inside the file.
set -euo pipefail
usage() { echo "usage: carry_pieces.sh split FILE BYTES DIR | missing DIR | join DIR OUT | cap" >&2; exit 2; }
die() { echo "carry_pieces.sh: $*" >&2; exit 1; }
manifest() { # DIR: the manifest's path, which must exist
  [ -f "$1/manifest.sha256" ] || die "no manifest.sha256 in $1"
  echo "$1/manifest.sha256"
}
pieces() { tail -n +2 "$1/manifest.sha256" | awk '{print $2}'; }  # DIR: the piece names, in order
missing() { # DIR: the pieces its manifest names that it lacks
  manifest "$1" > /dev/null
  local p
  for p in $(pieces "$1"); do [ -f "$1/$p" ] || echo "$p"; done
}

case ${1:-} in
  split)
    [ $# -eq 4 ] || usage
    file=$2 bytes=$3 dir=$4 name=$(basename "$2")
    [ -f "$file" ] || die "no file $file"
    [[ $bytes =~ ^[1-9][0-9]*$ ]] || die "BYTES must be a positive whole number, got '$bytes'"
    mkdir -p "$dir"
    rm -f "$dir/$name".[0-9][0-9][0-9] "$dir/manifest.sha256"
    split -b "$bytes" -d -a 3 "$file" "$dir/$name."
    { sha256sum "$file" | awk -v n="$name" '{print $1 "  " n}'
      (cd "$dir" && sha256sum "$name".[0-9][0-9][0-9]); } > "$dir/manifest.sha256.tmp"
    mv "$dir/manifest.sha256.tmp" "$dir/manifest.sha256"
    echo "$(pieces "$dir" | wc -l) pieces of at most $bytes bytes in $dir" ;;
  cap)
    [ $# -eq 1 ] || usage
    tree=$(cd "$(dirname "$0")/../.." && { git ls-files -z; git ls-files -z --others --exclude-standard; } |
           du -cb --files0-from=- | tail -n 1 | cut -f 1)
    echo $(( 64 * 1024 * 1024 - tree - 2 * 1024 * 1024 )) ;;
  missing)
    [ $# -eq 2 ] || usage
    missing "$2" ;;
  join)
    [ $# -eq 3 ] || usage
    dir=$2 out=$3 m=$(manifest "$2")
    lost=$(missing "$dir")
    [ -z "$lost" ] || die "$dir lacks $(echo "$lost" | wc -l) of $(pieces "$dir" | wc -l) pieces: $(echo "$lost" | tr '\n' ' ')"
    bad=$(tail -n +2 "$m" | (cd "$dir" && sha256sum -c --quiet - 2>/dev/null) | sed 's/: FAILED.*//' || true)
    [ -z "$bad" ] || die "damaged piece(s) in $dir (sha256 differs from the manifest): $(echo "$bad" | tr '\n' ' ')"
    tmp="$out.tmp"
    (cd "$dir" && cat $(pieces .)) > "$tmp"
    want=$(head -n 1 "$m" | awk '{print $1}') got=$(sha256sum "$tmp" | awk '{print $1}')
    if [ "$want" != "$got" ]; then rm -f "$tmp"; die "joined file's sha256 $got is not the manifest's $want"; fi
    mv "$tmp" "$out"
    echo "joined $(pieces "$dir" | wc -l) pieces into $out (sha256 $got)" ;;
  *) usage ;;
esac
