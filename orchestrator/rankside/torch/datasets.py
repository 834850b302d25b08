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


TOKENS_FILE = "tokens.bin"  # orchestrator.data's: a token set's bytes, one token each


class TokenSequences(Dataset):
    """A token set (``orch data make --from text``): memory-mapped byte tokens, cut into
    sequences of the dataset's length; sample ``i`` is tokens ``i*T .. i*T+T`` and its
    targets (the next tokens for a causal LM, the masked ones for a masked LM)."""

    def __init__(self, root: str, dataset: str, objective: str = "causal-lm") -> None:
        from orchestrator import zoo

        self.seq_len = zoo.get_dataset(dataset).seq_len
        self.tokens = np.memmap(os.path.join(root, TOKENS_FILE), dtype=np.uint8, mode="r")
        self.objective = objective

    def __len__(self) -> int:
        return max(0, (len(self.tokens) - 1) // self.seq_len)

    def __getitem__(self, i: int):
        from .transformers import lm_pair

        start = i * self.seq_len
        seq = torch.from_numpy(self.tokens[start:start + self.seq_len + 1].astype(np.int64))
        x, y = lm_pair(seq.unsqueeze(0), self.objective)
        return x[0], y[0]


def records(root: str, dataset: str, objective: str = "classify") -> Dataset:
    """The split at ``root`` in the format its files say: a token set's ``tokens.bin``,
    ``jpeg`` shards or ``raw`` records."""
    if os.path.isfile(os.path.join(root, TOKENS_FILE)):
        return TokenSequences(root, dataset, objective)
    if jpeg_shards.is_jpeg_dir(root):
        return JpegRecords(root, dataset)
    return RawRecords(root, dataset)


def loader(root: str, dataset: str, batch_size: int, rank: int, world: int,
           prefetch: bool, pin_memory: bool = False, objective: str = "classify") -> DataLoader:
    """``pin_memory``: the DataLoader puts each batch in pinned memory (only where CUDA is:
    the rank then copies it with ``non_blocking=True``)."""
    data = records(root, dataset, objective)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0,
                                 drop_last=True)
    dl = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True,
                    num_workers=1 if prefetch else 0,
                    prefetch_factor=4 if prefetch else None,
                    persistent_workers=prefetch, pin_memory=pin_memory)
    if len(dl) == 0:  # batches() would loop for ever without yielding one
        raise ValueError(f"--batch-size {batch_size} x {world} ranks is more than the "
                         f"{len(data)} samples of {root}: not one batch per epoch")
    return dl


def batches(dl: DataLoader):
    """Endless batches, a new shuffle each epoch (re-iterating costs t_io, as it should)."""
    epoch = 0
    while True:
        dl.sampler.set_epoch(epoch)
        yield from dl
        epoch += 1
