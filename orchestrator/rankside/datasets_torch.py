"""PyTorch input pipeline over orch's ``raw`` records (see datagen.py), prefetch on or off.

Prefetch off: the training process reads and decodes each batch itself (``num_workers=0``),
so all input time is exposed in t_io. Prefetch on: one loader worker process reads ahead
(``prefetch_factor`` batches), and t_io is only the time the training loop still waits.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .datagen import SHAPES


class RawRecords(Dataset):
    """Memory-mapped fixed-size records: label byte + uint8 pixels, decoded to float."""

    def __init__(self, root: str, dataset: str) -> None:
        (c, h, w), _ = SHAPES[dataset]
        self.shape = (c, h, w)
        size = 1 + c * h * w
        self.shards = [np.memmap(p, dtype=np.uint8, mode="r").reshape(-1, size)
                       for p in sorted(glob.glob(os.path.join(root, "shard-*.bin")))]
        if not self.shards:
            raise FileNotFoundError(f"no shard-*.bin under {root}")
        self.offsets = np.cumsum([0] + [len(s) for s in self.shards])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, i: int):
        shard = int(np.searchsorted(self.offsets, i, side="right") - 1)
        rec = self.shards[shard][i - self.offsets[shard]]
        x = torch.from_numpy(rec[1:].astype(np.float32)).view(self.shape).div_(255.0)
        return x.sub_(0.5).div_(0.25), int(rec[0])


def loader(root: str, dataset: str, batch_size: int, rank: int, world: int,
           prefetch: bool) -> DataLoader:
    data = RawRecords(root, dataset)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0,
                                 drop_last=True)
    return DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True,
                      num_workers=1 if prefetch else 0,
                      prefetch_factor=4 if prefetch else None,
                      persistent_workers=prefetch)


def batches(dl: DataLoader):
    """Endless batches, a new shuffle each epoch (re-iterating costs t_io, as it should)."""
    epoch = 0
    while True:
        dl.sampler.set_epoch(epoch)
        yield from dl
        epoch += 1
