#!/usr/bin/env bash
# GPU machine, in each call that carries Qwen pieces (see .qplan, written by scripts/gpu/prepare_carry_qwen.sh):
#   stage_qwen.sh        park this call's GGUF pieces in /root/qparts; unpack the corpora and bubblewrap if carried
#                        and install the carried wheels (.whl) into /tmp/site
#   stage_qwen.sh join [SIZE]  join the pieces in order; fathom.models.offline.qwen_coder_dir(SIZE) (0.5b, the
#                        default, or 1.5b) checks the sha256 and de-quantizes the model once into FATHOM's cache;
#                        source scripts/gpu/env.sh first
# /root survives between calls only while the machine stays warm.
set -euo pipefail
mkdir -p /root/qparts
case ${1:-park} in
  park)
    for f in .qa/qpart_* .qb/qpart_* .qc/qpart_* .qd/qpart_* .q[0-9]*/qpart_*; do if [ -f "$f" ]; then cp "$f" /root/qparts/; fi; done
    if [ -f .q1/corpora.tar.xz ]; then
      mkdir -p /root/.cache/fathom/corpora && tar -xJf .q1/corpora.tar.xz -C /root/.cache/fathom/corpora
      rm -rf /tmp/bwrap-deb && dpkg -x .q1/bubblewrap_*.deb /tmp/bwrap-deb && cp /tmp/bwrap-deb/usr/bin/bwrap /usr/local/bin/
    fi
    if [ -d .whl ]; then  # the wheels the image lacks, installed at once: every later call imports them
      mkdir -p /tmp/site && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    fi
    ls /root/qparts | tr '\n' ' '; du -sb /root/qparts ;;
  join)
    # qwen_coder_dir checks the joined file's sha256 before it converts (a missing or damaged piece fails there)
    [ -f /root/qwen.gguf ] || { cat /root/qparts/qpart_* > /root/qwen.gguf.part && mv /root/qwen.gguf.part /root/qwen.gguf; }
    python3 -c "import os
from fathom.models.offline import QWEN_CODER_CHECKPOINTS, qwen_coder_dir
os.environ[QWEN_CODER_CHECKPOINTS['${2:-0.5b}'].env_var] = '/root/qwen.gguf'
print(qwen_coder_dir('${2:-0.5b}'))" ;;
  *) echo "usage: stage_qwen.sh [join [SIZE]]" >&2; exit 2 ;;
esac
