#!/usr/bin/env bash
# GPU machine: vLLM 0.26.0 beside the image's torch 2.11 (the recipe in shared/gpu/vllm: the trimmed wheel in two
# parts plus 32 small wheels). Three calls back to back (the machine keeps /root and /tmp only while warm):
#   carry [".va"]: bash scripts/gpu/stage_vllm.sh a        carry [".vb"]: bash scripts/gpu/stage_vllm.sh b
#   carry [".vd"]: bash scripts/gpu/stage_vllm.sh d        (joins, checks, unpacks into /tmp/vsite, installs)
# Here, first: bash ../shared/gpu/vllm/prepare.sh .   (writes .va .vb .vd, which .gitignore keeps out of the tree)
# Then every later call: source scripts/gpu/env.sh
set -euo pipefail
case ${1:?usage: stage_vllm.sh a|b|d} in
  a) cp .va/vpart_aa /root/ ;;
  b) cp .vb/vpart_ab /root/ ;;
  d)
    if [ ! -f /tmp/vsite/vllm/__init__.py ]; then
      cat /root/vpart_aa /root/vpart_ab > /root/vllm-trim.tar.xz
      (cd /root && sha256sum -c "$OLDPWD/.vd/vllm-trim.sha256")
      mkdir -p /tmp/vsite && tar -xJf /root/vllm-trim.tar.xz -C /tmp/vsite
      python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite .vd/*.whl
    fi
    source scripts/gpu/env.sh
    python3 -c "import vllm; print('vllm', vllm.__version__)" ;;
  *) echo "usage: stage_vllm.sh a|b|d" >&2; exit 2 ;;
esac
