"""Write a synthetic data set in one framework's native on-disk format (rank side).

``raw``: CIFAR-10's binary layout generalised: fixed-size records of one label byte followed
by C*H*W uint8 pixels (channel-major), in shards of at most 10,000 records
(``shard-00000.bin`` ...). Readers memory-map it; decoding is the uint8 -> float conversion,
as for the real CIFAR-10 binaries. Other formats are added beside it by the frameworks that own
them (a writer per format in WRITERS).

``--from-raw DIR`` writes a format from a ``raw`` directory instead of from the seed: a real
data set (``orch data make --from``) is read once by the control plane into ``raw``
(training records in DIR, held-out ones in DIR/test), and every other format is converted from
those records, split by split, so all formats hold the same images in the same order.
"""

from __future__ import annotations

import argparse
import os

SHARD = 10_000
SHAPES = {"cifar": ((3, 32, 32), 10), "imagenet": ((3, 224, 224), 1000)}


def _shards(dataset: str, samples: int, seed: int):
    """The data set's random labels and CHW uint8 pixels, shard by shard: the one source every
    format writes from, so all formats hold the same images in the same order."""
    import numpy as np

    (c, h, w), classes = SHAPES[dataset]
    rng = np.random.default_rng(seed)
    for start in range(0, samples, SHARD):
        n = min(SHARD, samples - start)
        labels = rng.integers(0, classes, n)
        yield labels, rng.integers(0, 256, (n, c * h * w), dtype=np.uint8)


def raw_shards(raw_dir: str, dataset: str):
    """The (labels, pixels) of every ``shard-*.bin`` in ``raw_dir``, in shard order."""
    import glob

    import numpy as np

    (c, h, w), _ = SHAPES[dataset]
    for path in sorted(glob.glob(os.path.join(raw_dir, "shard-*.bin"))):
        records = np.fromfile(path, dtype=np.uint8).reshape(-1, 1 + c * h * w)
        yield records[:, 0].astype(np.int64), records[:, 1:]


def _images(shards):
    """One (label, CHW uint8 bytes) per record, in record order."""
    for labels, pixels in shards:
        for k in range(len(labels)):
            yield int(labels[k]), pixels[k].tobytes()


def write_raw(out: str, shards) -> None:
    import numpy as np

    os.makedirs(out, exist_ok=True)
    for shard, (labels, pixels) in enumerate(shards):
        records = np.empty((len(labels), 1 + pixels.shape[1]), dtype=np.uint8)
        records[:, 0] = labels
        records[:, 1:] = pixels
        tmp = os.path.join(out, f".shard-{shard:05d}.tmp")
        records.tofile(tmp)
        os.replace(tmp, os.path.join(out, f"shard-{shard:05d}.bin"))


def write_tfrecord(out: str, shards) -> None:
    """TFRecord shards of tf.train.Example {image: raw CHW uint8 bytes, label: int64}."""
    import tensorflow as tf

    os.makedirs(out, exist_ok=True)
    writer, shard = None, -1
    for i, (label, image) in enumerate(_images(shards)):
        if i % SHARD == 0:
            if writer is not None:
                writer.close()
            shard += 1
            writer = tf.io.TFRecordWriter(os.path.join(out, f"shard-{shard:05d}.tfrecord"))
        example = tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}))
        writer.write(example.SerializeToString())
    if writer is not None:
        writer.close()


def write_recordio(out: str, shards) -> None:
    """One indexed MXNet RecordIO file (data.rec + data.idx): IRHeader(label) + raw CHW bytes."""
    import mxnet as mx

    os.makedirs(out, exist_ok=True)
    rec = mx.recordio.MXIndexedRecordIO(os.path.join(out, "data.idx"),
                                        os.path.join(out, "data.rec"), "w")
    for i, (label, image) in enumerate(_images(shards)):
        rec.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(label), i, 0), image))
    rec.close()


WRITERS = {"raw": write_raw, "tfrecord": write_tfrecord, "recordio": write_recordio}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--format", required=True, choices=sorted(WRITERS))
    p.add_argument("--dataset", required=True, choices=sorted(SHAPES))
    p.add_argument("--samples", type=int, default=None, help="random images (not with --from-raw)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--from-raw", default=None, help="convert this raw directory (and its "
                   "test/ split) instead of writing random images")
    a = p.parse_args(argv)
    if a.from_raw is None:
        WRITERS[a.format](a.out, _shards(a.dataset, a.samples, a.seed))
        return
    WRITERS[a.format](a.out, raw_shards(a.from_raw, a.dataset))
    test = os.path.join(a.from_raw, "test")
    if os.path.isdir(test):
        WRITERS[a.format](os.path.join(a.out, "test"), raw_shards(test, a.dataset))


if __name__ == "__main__":
    main()
