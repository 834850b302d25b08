"""PyTorch input pipeline over orch's ``raw`` records (see datagen.py) or ``jpeg`` shards
(encoded images, see jpeg_shards.py), prefetch on or off.

Prefetch off: the training process reads and decodes each batch itself (``num_workers=0``),
so all input time is exposed in t_io — for ``jpeg``, Pillow's decoding of every image of the
batch. Prefetch on: one loader worker process reads ahead (``prefetch_factor`` batches), and
t_io is only the time the training loop still waits.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from .. import jpeg_shards
from ..datagen import SHAPES


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


class JpegRecords(Dataset):
    """orch's ``jpeg`` shards: each image decoded (Pillow) when it is read, then normalised as
    :class:`RawRecords` normalises."""

    format = jpeg_shards.FORMAT

    def __init__(self, root: str, dataset: str) -> None:
        (c, h, w), _ = SHAPES[dataset]
        self.shards = jpeg_shards.JpegShards(root, (c, h, w))

    def __len__(self) -> int:
        return len(self.shards)

    def __getitem__(self, i: int):
        x = torch.from_numpy(self.shards.image(i).astype(np.float32)).div_(255.0)
        return x.sub_(0.5).div_(0.25), int(self.shards.labels[i])


def records(root: str, dataset: str) -> Dataset:
    """The split at ``root`` in the format its files say: ``jpeg`` shards or ``raw`` records."""
    if jpeg_shards.is_jpeg_dir(root):
        return JpegRecords(root, dataset)
    return RawRecords(root, dataset)


def loader(root: str, dataset: str, batch_size: int, rank: int, world: int,
           prefetch: bool, pin_memory: bool = False) -> DataLoader:
    """``pin_memory``: the DataLoader puts each batch in pinned memory (only where CUDA is:
    the rank then copies it with ``non_blocking=True``)."""
    data = records(root, dataset)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0,
                                 drop_last=True)
    dl = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True,
                    num_workers=1 if prefetch else 0,
                    prefetch_factor=4 if prefetch else None,
                    persistent_workers=prefetch, pin_memory=pin_memory)
    if len(dl) == 0:  # batches() would loop for ever without yielding one
        raise ValueError(f"--batch-size {batch_size} x {world} ranks is more than the "
                         f"{len(data)} images of {root}: not one batch per epoch")
    return dl


def batches(dl: DataLoader):
    """Endless batches, a new shuffle each epoch (re-iterating costs t_io, as it should)."""
    epoch = 0
    while True:
        dl.sampler.set_epoch(epoch)
        yield from dl
        epoch += 1
