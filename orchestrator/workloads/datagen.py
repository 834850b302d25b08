"""Write a synthetic data set in one framework's native on-disk format (rank side).

``raw``: CIFAR-10's binary layout generalised: fixed-size records of one label byte followed
by C*H*W uint8 pixels (channel-major), in shards of at most 10,000 records
(``shard-00000.bin`` ...). Readers memory-map it; decoding is the uint8 -> float conversion,
as for the real CIFAR-10 binaries. Other formats are added beside it by the frameworks that own
them (a writer per format in WRITERS).
"""

from __future__ import annotations

import argparse
import os

SHARD = 10_000
SHAPES = {"cifar": ((3, 32, 32), 10), "imagenet": ((3, 224, 224), 1000)}


def write_raw(out: str, dataset: str, samples: int, seed: int) -> None:
    import numpy as np

    (c, h, w), classes = SHAPES[dataset]
    rng = np.random.default_rng(seed)
    os.makedirs(out, exist_ok=True)
    for shard, start in enumerate(range(0, samples, SHARD)):
        n = min(SHARD, samples - start)
        records = np.empty((n, 1 + c * h * w), dtype=np.uint8)
        records[:, 0] = rng.integers(0, classes, n)
        records[:, 1:] = rng.integers(0, 256, (n, c * h * w), dtype=np.uint8)
        tmp = os.path.join(out, f".shard-{shard:05d}.tmp")
        records.tofile(tmp)
        os.replace(tmp, os.path.join(out, f"shard-{shard:05d}.bin"))


WRITERS = {"raw": write_raw}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--format", required=True, choices=sorted(WRITERS))
    p.add_argument("--dataset", required=True, choices=sorted(SHAPES))
    p.add_argument("--samples", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    WRITERS[a.format](a.out, a.dataset, a.samples, a.seed)


if __name__ == "__main__":
    main()
