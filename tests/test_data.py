"""On-disk data: orch data make writes the formats, and --data makes t_io real."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from .conftest import built_python, orch, run_orch


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    run_orch("data", "make", "--out", out, "--samples", 300, check=True)
    return out


def test_make_writes_manifest_and_records(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest == {"dataset": "cifar", "samples": 300, "seed": 0, "formats": ["raw"]}
    records = np.fromfile(dataset / "raw" / "shard-00000.bin", dtype=np.uint8)
    assert records.size == 300 * (1 + 3 * 32 * 32)
    labels = records.reshape(300, -1)[:, 0]
    assert labels.max() < 10 and len(set(labels)) > 1
    again = run_orch("data", "make", "--out", dataset, "--samples", 300, check=True)
    assert "raw: already there" in again.stderr


@pytest.mark.ranks
def test_sweep_reads_from_disk_with_and_without_prefetch(dataset, tmp_path):
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "2", "--data", dataset, "--prefetch", "yes,no", "--iters", 4,
             "--warmup", 1, "--out", out, check=True)
    recs = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert sorted(r["prefetch"] for r in recs) == [False, True]
    for r in recs:
        assert r["state"] == "COMPLETED" and r["data"] == str(dataset)
    no_prefetch = next(r for r in recs if not r["prefetch"])
    assert no_prefetch["t_io"] > 0  # reading and decoding are in the training loop
    # The compute rate leaves t_io out: the reported rate over the breakdown window's share of
    # iteration time not spent on input, above the reported rate by construction.
    iters = pd.read_parquet(out / "results" / "iterations.parquet")
    rows = iters[(iters["run_id"] == no_prefetch["run_id"]) & (iters["window"] == "breakdown")
                 & ~iters["warmup_iter"]]
    slowest = rows.groupby("iter")["t_iter"].max().sum()
    busy = (rows["t_iter"] - rows["t_io"]).groupby(rows["iter"]).max().sum()
    assert no_prefetch["samples_per_s_compute"] == pytest.approx(
        no_prefetch["samples_per_s"] * slowest / busy)
    assert no_prefetch["samples_per_s_compute"] > no_prefetch["samples_per_s"]
    header = json.loads((out / no_prefetch["run_id"] / "ranks" / "rank-0.jsonl")
                        .read_text().splitlines()[0])
    assert header["argv"][-4:] == ["--data", f"{dataset}/raw", "--prefetch", "no"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "/nonexistent"], "no manifest.json there"),
        (["--dataset", "imagenet", "--model", "resnet18"], "holds cifar samples"),
        (["--prefetch", "maybe"], "expected yes, no or yes,no"),
    ],
)
def test_bad_data_input(dataset, tmp_path, args, message):
    if "--data" not in args:
        args = [*args, "--data", str(dataset)]
    proc = run_orch("sweep", "--nodes", "1", *args, "--out", tmp_path / "x")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_bad_make_input(tmp_path):
    proc = run_orch("data", "make", "--out", tmp_path, "--format", "bmp")
    assert proc.returncode == 2 and "unknown data format 'bmp'" in proc.stderr
    proc = run_orch("data", "make", "--out", tmp_path, "--format", "jpeg")
    assert proc.returncode == 2 and "--format jpeg: only with --from an ImageFolder" in proc.stderr


def need_env(framework: str) -> None:
    """Skip without the framework's environment, except under CI (make test builds it)."""
    built_python(framework)


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    need_env("tensorflow")
    need_env("mxnet")
    out = tmp_path_factory.mktemp("native")
    run_orch("data", "make", "--out", out, "--samples", 200, "--format",
             "raw,tfrecord,recordio", check=True)
    return out


def test_native_formats_hold_the_same_images(native):
    manifest = json.loads((native / "manifest.json").read_text())
    assert manifest["formats"] == ["raw", "tfrecord", "recordio"]
    assert (native / "tfrecord" / "shard-00000.tfrecord").stat().st_size > 200 * 3072
    rec = (native / "recordio" / "data.rec").read_bytes()
    raw = np.fromfile(native / "raw" / "shard-00000.bin", dtype=np.uint8).reshape(200, -1)
    assert raw[7, 1:].tobytes() in rec and raw[199, 1:].tobytes() in rec


@pytest.mark.ranks
@pytest.mark.parametrize("mode", ["tf-allreduce", "mxnet-kvstore"])
def test_frameworks_read_their_native_format(native, tmp_path, mode):
    out = tmp_path / "sweep"
    run_orch("sweep", "--mode", mode, "--nodes", "2", "--data", native, "--prefetch", "no,yes",
             "--iters", 3, "--warmup", 1, "--out", out, check=True)
    recs = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert sorted(r["prefetch"] for r in recs) == [False, True]
    for r in recs:
        assert r["state"] == "COMPLETED", r["reason"]
    assert next(r for r in recs if not r["prefetch"])["t_io"] > 0


def test_mode_without_a_reader_refuses_data(dataset, tmp_path):
    proc = run_orch("sweep", "--mode", "allreduce-bench", "--nodes", "1", "--data", dataset,
                    "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "mode 'allreduce-bench' reads no on-disk data yet" in proc.stderr


# --- real labelled data sets: orch data make --from ----------------------------------------

def _records(path, image_bytes=3 * 32 * 32):
    return np.fromfile(path, dtype=np.uint8).reshape(-1, 1 + image_bytes)


def _tfrecord_count(path) -> int:
    """Records in a TFRecord file, from its framing (u64 length, u32 crc, data, u32 crc)."""
    import struct

    data, n, at = path.read_bytes(), 0, 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        at += 8 + 4 + length + 4
        n += 1
    return n


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    need_env("tensorflow")
    need_env("mxnet")
    out = tmp_path_factory.mktemp("digits")
    run_orch("data", "make", "--out", out, "--from", "digits", "--format",
             "raw,tfrecord,recordio", check=True)
    return out


def test_digits_are_real_labelled_images_with_a_held_out_split(digits):
    from sklearn.datasets import load_digits

    manifest = json.loads((digits / "manifest.json").read_text())
    assert manifest["source"] == "digits" and manifest["classes"] == 10
    assert "CC BY 4.0" in manifest["origin"]
    assert manifest["samples"] + manifest["test_samples"] == 1797
    assert 0.18 < manifest["test_samples"] / 1797 < 0.22
    train, test = _records(digits / "raw" / "shard-00000.bin"), \
        _records(digits / "raw" / "test" / "shard-00000.bin")
    assert (len(train), len(test)) == (manifest["samples"], manifest["test_samples"])
    for split in (train, test):  # every class in both splits (stratified)
        assert sorted(set(split[:, 0].tolist())) == list(range(10))
    # The images are sklearn's, upscaled 4x and repeated over 3 channels: find one back.
    d = load_digits()
    img = train[0, 1:].reshape(3, 32, 32)
    assert (img[0] == img[1]).all() and (img[0] == img[2]).all()
    small = img[0, ::4, ::4].astype(float) * 16 / 255
    match = np.flatnonzero(np.abs(d.images - small).reshape(1797, -1).max(axis=1) < 0.1)
    assert len(match) >= 1 and train[0, 0] in d.target[match]
    # The other formats are converted from the same records, split by split.
    assert _tfrecord_count(digits / "tfrecord" / "shard-00000.tfrecord") == len(train)
    assert _tfrecord_count(digits / "tfrecord" / "test" / "shard-00000.tfrecord") == len(test)
    assert len((digits / "recordio" / "test" / "data.idx").read_text().splitlines()) == len(test)
    rec = (digits / "recordio" / "test" / "data.rec").read_bytes()
    assert test[5, 1:].tobytes() in rec
    again = run_orch("data", "make", "--out", digits, "--from", "digits", check=True)
    assert "raw: already there" in again.stderr
    other = run_orch("data", "make", "--out", digits, "--samples", 10)
    assert other.returncode == 2 and "already holds digits (1438 images)" in other.stderr


def _cifar10_dir(root, per_batch=6):
    import pickle

    root.mkdir()
    rng = np.random.default_rng(1)
    for name in ("data_batch_1", "data_batch_2", "test_batch"):
        batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                 b"labels": [int(v) for v in rng.integers(0, 10, per_batch)]}
        (root / name).write_bytes(pickle.dumps(batch))
    return root


def _mnist_dir(root, n=8, bad_label=None):
    import gzip
    import struct

    root.mkdir()
    rng = np.random.default_rng(2)
    for prefix in ("train", "t10k"):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        if bad_label is not None:
            labels[-1] = bad_label
        with gzip.open(root / f"{prefix}-images-idx3-ubyte.gz", "wb") as fh:
            fh.write(struct.pack(">HBBIII", 0, 8, 3, n, 28, 28) + images.tobytes())
        (root / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">HBBI", 0, 8, 1, n) + labels.tobytes())
    return root, images, labels


def _imagefolder(root, per_class=5, size=(40, 30)):
    from PIL import Image

    rng = np.random.default_rng(3)
    for c in ("cat", "dog", "emu"):
        (root / c).mkdir(parents=True)
        for k in range(per_class):
            pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / c / f"{k}.{'png' if k % 2 else 'jpg'}")
    return root


def test_cifar_mnist_and_imagefolder_sources(tmp_path):
    cifar = _cifar10_dir(tmp_path / "cifar-10-batches-py")
    run_orch("data", "make", "--out", tmp_path / "c", "--from", cifar, check=True)
    m = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert (m["samples"], m["test_samples"], m["classes"]) == (12, 6, 10)
    train = _records(tmp_path / "c" / "raw" / "shard-00000.bin")
    import pickle

    first = pickle.loads((cifar / "data_batch_1").read_bytes())
    assert train[0, 1:].tobytes() == first[b"data"][0].tobytes()  # CHW, as CIFAR stores it
    assert train[0, 0] == first[b"labels"][0]

    mnist, images, labels = _mnist_dir(tmp_path / "mnist")
    run_orch("data", "make", "--out", tmp_path / "m", "--from", mnist, check=True)
    test = _records(tmp_path / "m" / "raw" / "test" / "shard-00000.bin")
    img = test[-1, 1:].reshape(3, 32, 32)
    assert (img[:, 2:30, 2:30] == images[-1]).all() and img[:, :2].max() == 0  # padded 28->32
    assert test[-1, 0] == labels[-1]

    folder = _imagefolder(tmp_path / "folder")
    run_orch("data", "make", "--out", tmp_path / "f", "--from", folder, "--test-fraction",
             "0.4", check=True)
    m = json.loads((tmp_path / "f" / "manifest.json").read_text())
    assert (m["samples"], m["test_samples"], m["classes"]) == (9, 6, 3)


def test_bad_real_data_input(tmp_path):
    (tmp_path / "empty").mkdir()
    mnist, _, _ = _mnist_dir(tmp_path / "mnist", bad_label=12)
    one_each = _imagefolder(tmp_path / "one", per_class=1)
    cases = [
        (["--from", tmp_path / "empty"], "no known data set format there"),
        (["--from", tmp_path / "nowhere"], "not a directory"),
        (["--from", mnist], "label 12 outside the 10 classes"),
        (["--from", one_each], "the held-out split is empty"),
        (["--from", "digits", "--test-fraction", "1.5"], "must be between 0 and 1"),
        (["--from", "digits", "--samples", "5"], "--samples: not with --from"),
    ]
    for args, message in cases:
        proc = run_orch("data", "make", "--out", tmp_path / "out", *args)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


# --- an ImageFolder tree kept encoded: JPEG decoded by the ranks ----------------------------

def _jpeg_tree(root, per_class=20):
    """2 classes of real 40x40 JPEG files (one class darker: a learnable difference)."""
    from PIL import Image

    rng = np.random.default_rng(4)
    for label, c in enumerate(("dark", "light")):
        (root / c).mkdir(parents=True)
        for k in range(per_class):
            pixels = rng.integers(0, 128, (40, 40, 3), dtype=np.uint8) + 127 * label
            Image.fromarray(pixels.astype(np.uint8)).save(root / c / f"{k:02d}.jpg", quality=90)
    return root


@pytest.fixture(scope="module")
def jpeg_set(tmp_path_factory):
    tree = _jpeg_tree(tmp_path_factory.mktemp("tree") / "tree")
    (tree / "dark" / "README.txt").write_text("not an image")
    out = tmp_path_factory.mktemp("jpegset")
    made = run_orch("data", "make", "--out", out, "--from", tree, check=True)
    assert "left out 1 file(s) that are not images by their suffix (README.txt)" in made.stderr
    return tree, out


def test_imagefolder_is_kept_encoded_and_decodes_to_the_raw_pixels(jpeg_set, tmp_path):
    from orchestrator.rankside.jpeg_shards import JpegShards

    tree, out = jpeg_set
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["formats"] == ["jpeg"]
    assert (manifest["samples"], manifest["test_samples"], manifest["classes"]) == (32, 8, 2)
    shards = JpegShards(str(out / "jpeg"), (3, 32, 32))
    first = (tree / "dark" / "00.jpg").read_bytes()
    files = {f.read_bytes(): f for f in tree.rglob("*.jpg")}
    assert shards.encoded(0) in files  # the file's bytes, as they are
    assert len(first) > 0 and (out / "jpeg" / "classes.txt").read_text() == "dark\nlight\n"
    # Written as raw too (decoded at make time), the same images come out: one rule, one split.
    both = tmp_path / "both"
    run_orch("data", "make", "--out", both, "--from", tree, "--format", "jpeg,raw", check=True)
    raw = _records(both / "raw" / "test" / "shard-00000.bin")
    test = JpegShards(str(both / "jpeg" / "test"), (3, 32, 32))
    assert raw[:, 0].tolist() == test.labels.tolist()
    assert all((test.image(i).ravel() == raw[i, 1:]).all() for i in range(len(test)))
    # horovod decodes JPEG with its environment's Pillow (torch-mpi: none here): without it,
    # the set's raw records where they are, else one line saying how to add them.
    from orchestrator import data as datamod
    from orchestrator import site as sitemod

    pillow = datamod._has_pillow(sitemod.load("local")[0], "torch-mpi")
    for root, fmt in ((out, "jpeg" if pillow else None), (both, "jpeg" if pillow else "raw")):
        proc = run_orch("sweep", "--mode", "horovod", "--nodes", "1", "--data", root,
                        "--dry-run", "--out", tmp_path / "x")
        if fmt is None:
            assert proc.returncode == 2 and "lacks: add pillow" in proc.stderr, proc.stderr
            assert f"--format jpeg,{datamod.modes.get('horovod').data_format}" in proc.stderr
        else:
            assert proc.returncode == 0 and f"--data {root}/{fmt} " in proc.stdout, proc.stderr


@pytest.mark.ranks
def test_ranks_decode_jpeg_in_their_io_phase(jpeg_set, tmp_path):
    _, data = jpeg_set
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "2", "--model", "lenet5", "--batch-size", 4, "--data", data,
             "--prefetch", "no", "--iters", 3, "--warmup", 1, "--out", out, check=True)
    (rec,) = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert rec["state"] == "COMPLETED", rec["reason"]
    assert rec["t_io"] > 0  # the batch's JPEG files are decoded inside the I/O phase
    header = json.loads((out / rec["run_id"] / "ranks" / "rank-1.jsonl").read_text()
                        .splitlines()[0])
    argv = header["argv"]
    assert argv[argv.index("--data") + 1] == f"{data}/jpeg" and "--prefetch" in argv
    # A mode whose rank cannot decode JPEG says so before anything runs.
    proc = run_orch("sweep", "--mode", "cntk", "--nodes", "1", "--data", data, "--dry-run",
                    "--out", tmp_path / "x")
    assert proc.returncode == 2 and "mode 'cntk' cannot decode the JPEG images" in proc.stderr


def test_bad_imagefolder_input(tmp_path):
    tree = _jpeg_tree(tmp_path / "tree", per_class=3)
    broken = tree / "light" / "01.jpg"
    broken.write_bytes(broken.read_bytes()[:200])  # a truncated JPEG
    proc = run_orch("data", "make", "--out", tmp_path / "out", "--from", tree)
    assert proc.returncode == 2 and f"{broken}: not a readable image" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    (tree / "zebra").mkdir()  # a class directory with no image in it (as torchvision: refused)
    (tree / "zebra" / "notes.txt").write_text("no image")
    broken.unlink()
    proc = run_orch("data", "make", "--out", tmp_path / "out", "--from", tree)
    assert proc.returncode == 2 and f"{tree / 'zebra'}: no image file" in proc.stderr


# A damaged --data manifest of every kind: exit 2 with a one-line error.

MANIFESTS = {
    "not utf-8": b"\xff\xfe{", "empty": b"", "a list": b"[]", "empty object": b"{}",
    "wrong types": b'{"dataset": 1, "samples": "x", "seed": 0, "formats": "npy"}',
    "zero samples": b'{"dataset": "cifar", "samples": 0, "seed": 0, "formats": []}',
    "other dataset": b'{"dataset": "imagenet", "samples": 4, "seed": 0, "formats": ["npy"]}',
    "unknown field": b'{"dataset": "cifar", "samples": 4, "seed": 0, "formats": [], "x": 1}',
    "deep": b"[" * 100000 + b"]" * 100000,
    "missing": None,
}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_fuzz_data_manifest(tmp_path, name):
    d = tmp_path / "data"
    d.mkdir()
    if MANIFESTS[name] is not None:
        (d / "manifest.json").write_bytes(MANIFESTS[name])
    code, _, err = orch("sweep", "--nodes", "1", "--dry-run", "--data", d,
                        "--out", tmp_path / "o")
    assert code == 2 and err.startswith("orch: error:"), err
