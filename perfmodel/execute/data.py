"""Training data: seeded synthetic tokens (default, no downloads) or a local text file read as bytes.

Every rank draws the whole global batch of a step from a generator seeded by (seed, step) and keeps its own
slice: sequences of its data-parallel rank, positions of its context-parallel rank. So any layout, and a
single process, sees exactly the same tokens: the basis of the loss-equality tests.
"""

from __future__ import annotations

from pathlib import Path

import torch

BYTE_VOCAB = 256  # the byte-level tokenizer: one token per byte


class Batches:
    """Global batches [global_batch, seq + 1] of token ids for step 0, 1, ..."""

    def __init__(self, vocab: int, global_batch: int, seq: int, seed: int, text: str | Path | None = None):
        self.vocab, self.global_batch, self.seq, self.seed = vocab, global_batch, seq, seed
        self.data = None
        if text is not None:
            raw = Path(text).read_bytes()
            self.data = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()

    def step(self, i: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        if self.data is None:
            return torch.randint(0, self.vocab, (self.global_batch, self.seq + 1), generator=gen)
        starts = torch.randint(0, len(self.data) - self.seq - 1, (self.global_batch,), generator=gen)
        return torch.stack([self.data[s: s + self.seq + 1] for s in starts.tolist()])


def local_slice(tokens: torch.Tensor, dp: int, dp_rank: int, positions: torch.Tensor):
    """(inputs, targets) of one data-parallel rank at the given sequence positions: [global/dp, len(positions)]."""
    rows = tokens.shape[0] // dp
    mine = tokens[dp_rank * rows: (dp_rank + 1) * rows]
    return mine[:, positions], mine[:, positions + 1]
