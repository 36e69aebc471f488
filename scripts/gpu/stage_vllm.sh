#!/usr/bin/env bash
# GPU machine: vLLM 0.26.0 beside the image's torch 2.11 (the recipe in shared/gpu/vllm: the trimmed wheel in two
# or three parts plus 32 small wheels). Calls back to back (the machine keeps /root and /tmp only while warm):
#   carry [".va"]: bash scripts/gpu/stage_vllm.sh a        carry [".vb"]: bash scripts/gpu/stage_vllm.sh b
#   carry [".vc"]: bash scripts/gpu/stage_vllm.sh c        (only where the wheel was cut in three)
#   carry [".vd"]: bash scripts/gpu/stage_vllm.sh d        (joins, checks, unpacks into /tmp/vsite, installs)
# Here, first: bash ../shared/gpu/vllm/prepare.sh .   (writes .va .vb .vd, which .gitignore keeps out of the tree);
# scripts/gpu/prepare_carry_qwen.sh cuts the wheel again to fit beside the working tree (.va .vb [.vc]).
# Then every later call: source scripts/gpu/env.sh
set -euo pipefail
case ${1:?usage: stage_vllm.sh a|b|c|d} in
  a|b|c) cp .v"$1"/vpart_a? /root/ ;;
  d)
    if [ ! -f /tmp/vsite/vllm/__init__.py ]; then
      cat /root/vpart_a? > /root/vllm-trim.tar.xz
      (cd /root && sha256sum -c "$OLDPWD/.vd/vllm-trim.sha256")
      mkdir -p /tmp/vsite && tar -xJf /root/vllm-trim.tar.xz -C /tmp/vsite
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite .vd/*.whl
    fi
    source scripts/gpu/env.sh
    python3 -c "import vllm; print('vllm', vllm.__version__)" ;;
  *) echo "usage: stage_vllm.sh a|b|c|d" >&2; exit 2 ;;
esac
