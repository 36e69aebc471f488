"""Which SFT rows share an optimizer step: reader rows in steps of their own (``sft.reader_batches = "own"``).

HF's Trainer averages the loss over every loss token of an optimizer step's rows. A teacher transcript has
~930 loss tokens and a reader row (`fathom.train.reader_sft`) 5-55, so in a mixed step the reader rows are
~2% of what SFT minimises and the answering rows ~0.3% (bench/RESULTS.md, "run 17"): the reader learns the
commonest short reply, "not found in this text", and refuses chunks that hold the answer. With "own",
`KindBlockSampler` orders each epoch so that every optimizer step (per-device batch x gradient accumulation
x processes) holds rows of one kind only, so a reader step's loss is the mean over reader tokens alone. The
rows, their count and the epochs are the same as with "mixed"; only which rows share a step changes.

This module orders indices; `fathom.train.sft` builds the rows and the trainer.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from torch.utils.data import Sampler


class KindBlockSampler(Sampler[int]):
    """Indices in blocks of `block` consecutive rows of one kind, the blocks in a random order.

    `kinds[i]` is row i's kind. Each kind's rows are shuffled and cut into blocks; the rows left over (fewer
    than a block of a kind) are cut into blocks together, so at most one block per extra kind mixes kinds,
    and a last block shorter than `block` comes last. Each pass (epoch) draws a new order from `seed` and the
    pass's number."""

    def __init__(self, kinds: Sequence[str], block: int, seed: int) -> None:
        if block < 1:
            raise ValueError(f"block must be >= 1, got {block}")
        self.kinds, self.block, self.seed = list(kinds), block, seed
        self.passes = 0

    def __len__(self) -> int:
        return len(self.kinds)

    def __iter__(self) -> Iterator[int]:
        rng = random.Random(f"{self.seed}/{self.passes}")
        self.passes += 1
        blocks: list[list[int]] = []
        left: list[int] = []
        for kind in sorted(set(self.kinds)):
            rows = [i for i, k in enumerate(self.kinds) if k == kind]
            rng.shuffle(rows)
            whole = len(rows) - len(rows) % self.block
            blocks += [rows[at : at + self.block] for at in range(0, whole, self.block)]
            left += rows[whole:]
        blocks += [left[at : at + self.block] for at in range(0, len(left), self.block)]
        # a short block (the rows' count not a multiple of `block`) goes last: anywhere else it would shift
        # every later block off the optimizer steps' boundaries
        tail = blocks.pop() if blocks and len(blocks[-1]) < self.block else []
        rng.shuffle(blocks)
        return iter([i for b in [*blocks, tail] for i in b])
