"""Real labelled image sets, read from the formats a cluster already has (`orch data make --from`).

Every number orch measured used to come from random images with random labels, so nothing said
whether a mode learns. This module reads a labelled data set and gives back one
in-memory form — uint8 pixels ``[N, C, H, W]`` at the shape of an orch dataset (``cifar``:
3x32x32), integer labels, a training and a held-out split — which ``orch.data`` writes in each
framework's native format. The same code reads the embedded set and a cluster's own copy.

Sources (``detect`` tells them apart by their files):

* ``digits`` — the embedded default: the UCI handwritten digits that scikit-learn ships (1,797
  8x8 greyscale images, 10 classes, no download at run time).
* CIFAR-10 / CIFAR-100 "python version" directories (``data_batch_1`` … ``test_batch``;
  ``train``/``test``/``meta``), their own train/test split.
* MNIST / Fashion-MNIST idx files (``train-images-idx3-ubyte`` …, optionally ``.gz``).
* An ImageFolder tree (``DIR/<class>/<image>.jpg|png|…``, class = directory name, sorted, the
  suffixes torchvision's ImageFolder takes): kept encoded by default (:func:`load_encoded`, the
  ``jpeg`` format, decoded by the ranks in their input pipeline), or decoded with Pillow at make
  time and resized to the dataset's shape for the array formats.

Images of another shape are brought to the dataset's: greyscale is repeated over the three
channels, smaller images are scaled up by an integer factor (nearest neighbour) and padded
(MNIST's 28x28 -> 32x32 by padding; digits' 8x8 -> 32x32 by 4x), larger ones are resized.
Where a source has no held-out split, a seeded ``test_fraction`` of each class is held out.

numpy and Pillow are imported inside the functions that need them: the CLI stays fast.
"""

from __future__ import annotations

import gzip
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError

DIGITS = "digits"
TEXT = "text"  # byte-level tokens of text on the machine (orch data make --from text)
# Where each embedded or well-known source comes from, for the manifest and the docs.
ORIGIN = {
    "digits": "UCI Optical Recognition of Handwritten Digits (E. Alpaydin, C. Kaynak, 1998; "
              "CC BY 4.0), as shipped in scikit-learn (BSD-3-Clause): 1,797 8x8 images, "
              "10 classes",
    "cifar10": "CIFAR-10 python batches (A. Krizhevsky, 2009)",
    "cifar100": "CIFAR-100 python batches (A. Krizhevsky, 2009), fine labels",
    "mnist": "MNIST-format idx files",
    "imagefolder": "ImageFolder tree (one directory per class)",
}
# torchvision's ImageFolder takes only these (torchvision.datasets.folder.IMG_EXTENSIONS); any
# other file in a class directory is left out, and orch says how many.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_CIFAR10 = ("data_batch_1", "test_batch")
_CIFAR100 = ("train", "test", "meta")
_MNIST = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
          "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


@dataclass
class LabelledSet:
    """A labelled data set in memory: uint8 ``[N, C, H, W]`` pixels and int64 labels."""

    kind: str
    origin: str
    classes: int
    train_x: Any
    train_y: Any
    test_x: Any
    test_y: Any


def detect(source: str) -> str:
    """The kind of data set at ``source`` (``digits`` names the embedded one), or one line
    saying which formats are known."""
    if source == DIGITS:
        return DIGITS
    root = Path(source).expanduser()
    if not root.is_dir():
        raise UserError(f"--from {source}: not a directory (nor 'digits', the embedded set)")
    names = {p.name for p in root.iterdir()}
    if all(n in names for n in _CIFAR10):
        return "cifar10"
    if all(n in names for n in _CIFAR100):
        return "cifar100"
    if all(n in names or n + ".gz" in names for n in _MNIST):
        return "mnist"
    classes = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    if classes and any(f.suffix.lower() in IMAGE_SUFFIXES
                       for c in classes for f in c.iterdir()):
        return "imagefolder"
    raise UserError(
        f"--from {source}: no known data set format there; expected CIFAR-10/100 python "
        f"batches (data_batch_1 … test_batch, or train/test/meta), MNIST idx files "
        f"(train-images-idx3-ubyte …), an ImageFolder tree (DIR/<class>/*.jpg), or 'digits'")


def load(source: str, shape: tuple[int, int, int], test_fraction: float = 0.2,
         seed: int = 0) -> LabelledSet:
    """Read the data set at ``source`` and bring it to ``shape`` (C, H, W), with its held-out
    split (its own, or a seeded stratified ``test_fraction``). Bad data is one line."""
    kind = detect(source)
    if not 0 < test_fraction < 1:
        raise UserError(f"--test-fraction {test_fraction}: must be between 0 and 1 (exclusive)")
    reader = {DIGITS: _digits, "cifar10": _cifar10, "cifar100": _cifar100, "mnist": _mnist,
              "imagefolder": _imagefolder}[kind]
    got = reader(source) if kind != "imagefolder" else _imagefolder(source, shape)
    if len(got) == 3:  # no split of its own
        x, y, classes = got
        train, test = _split(y, test_fraction, seed)
        tx, ty, vx, vy = x[train], y[train], x[test], y[test]
    else:
        tx, ty, vx, vy, classes = got
    for name, labels in (("training", ty), ("held-out", vy)):
        if len(labels) == 0:
            raise UserError(f"--from {source}: the {name} split is empty; give more images "
                            f"or another --test-fraction")
        bad = int(labels.min()) if int(labels.min()) < 0 else int(labels.max())
        if not 0 <= bad < classes:
            raise UserError(f"--from {source}: {name} label {bad} outside the "
                            f"{classes} classes (0..{classes - 1}); check the labels file")
    return LabelledSet(kind=kind, origin=ORIGIN[kind], classes=classes,
                       train_x=to_shape(tx, shape), train_y=ty.astype("int64"),
                       test_x=to_shape(vx, shape), test_y=vy.astype("int64"))


def _split(labels, fraction: float, seed: int):
    """Seeded, stratified: ``fraction`` of each class (at least one image of a class with two
    or more) is held out, so every class is in both splits where it can be."""
    import numpy as np

    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        rng.shuffle(idx)
        k = max(1, round(len(idx) * fraction)) if len(idx) > 1 else 0
        test.extend(idx[:k].tolist())
    mask = np.zeros(len(labels), dtype=bool)
    mask[test] = True
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def to_shape(x, shape: tuple[int, int, int]):
    """uint8 ``[N, C, H, W]`` at ``shape``: channels repeated (grey -> RGB), an integer
    nearest-neighbour scale-up then centred padding, or a resize when the image is larger
    (``rankside.jpeg_shards.fit``: ranks decoding the ``jpeg`` format apply the same rule)."""
    from ..rankside.jpeg_shards import fit

    c = shape[0]
    if x.shape[1] not in (1, c):
        raise UserError(f"images with {x.shape[1]} channels cannot become {c}-channel images")
    return fit(x, shape)


def _digits(_source: str):
    import numpy as np

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise UserError("--from digits needs scikit-learn in orch's environment "
                        "(pip install scikit-learn)") from None
    d = load_digits()
    # 0..16 grey levels -> 0..255, one channel
    x = np.rint(d.images * (255 / 16)).astype(np.uint8)[:, None, :, :]
    return x, d.target.astype(np.int64), 10


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh, encoding="bytes")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise UserError(f"{path}: not a CIFAR python batch ({exc})") from None


def _cifar_batch(path: Path, label_key: bytes):
    import numpy as np

    d = _unpickle(path)
    if b"data" not in d or label_key not in d:
        raise UserError(f"{path}: a CIFAR batch has 'data' and '{label_key.decode()}'; "
                        f"this one has {sorted(k.decode() for k in d)}")
    x = np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    return x, np.asarray(d[label_key], dtype=np.int64)


def _cifar10(source: str):
    import numpy as np

    root = Path(source)
    batches = sorted(p for p in root.glob("data_batch_*") if p.name[11:].isdigit())
    parts = [_cifar_batch(p, b"labels") for p in batches]
    tx = np.concatenate([p[0] for p in parts])
    ty = np.concatenate([p[1] for p in parts])
    vx, vy = _cifar_batch(root / "test_batch", b"labels")
    return tx, ty, vx, vy, 10


def _cifar100(source: str):
    root = Path(source)
    tx, ty = _cifar_batch(root / "train", b"fine_labels")
    vx, vy = _cifar_batch(root / "test", b"fine_labels")
    return tx, ty, vx, vy, 100


def _idx(path: Path):
    """An idx file (MNIST's format): magic 0x00000803 (images) or 0x00000801 (labels)."""
    import numpy as np

    if not path.exists():
        path = path.with_name(path.name + ".gz")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
        zero, dtype, ndim = struct.unpack(">HBB", raw[:4])
        dims = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    except (OSError, struct.error, EOFError) as exc:
        raise UserError(f"{path}: not an idx file ({exc})") from None
    if zero != 0 or dtype != 0x08:
        raise UserError(f"{path}: not an unsigned-byte idx file (MNIST's format)")
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise UserError(f"{path}: holds {data.size} bytes, its header says {dims}")
    return data.reshape(dims)


def _mnist(source: str):
    import numpy as np

    root = Path(source)
    out = []
    for images, labels in ((_MNIST[0], _MNIST[1]), (_MNIST[2], _MNIST[3])):
        x, y = _idx(root / images), _idx(root / labels)
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise UserError(f"{root / images}: {len(x)} images but {len(y)} labels")
        out += [x[:, None, :, :], y.astype(np.int64)]
    return (*out, 10)


def _imagefolder(source: str, shape: tuple[int, int, int]):
    """Every image of the tree decoded and brought to ``shape`` one by one (the rule a rank
    decoding the ``jpeg`` format applies, so ``raw`` and ``jpeg`` hold the same pixels)."""
    import numpy as np

    from ..rankside.jpeg_shards import fit

    files, labels, classes = imagefolder_files(source)
    xs = [fit(np.asarray(_decoded(f)).transpose(2, 0, 1)[None], shape)[0] for f in files]
    return np.stack(xs), np.asarray(labels, dtype=np.int64), len(classes)


# --- ImageFolder trees kept encoded (the ``jpeg`` format, decoded by the ranks) -------------

@dataclass
class EncodedSet:
    """An ImageFolder tree's files, labelled and split, not decoded: (path, label) pairs."""

    kind: str
    origin: str
    classes: int
    class_names: list[str]
    train: list[tuple[Path, int]]
    test: list[tuple[Path, int]]
    ignored: list[Path]


def imagefolder_files(source: str) -> tuple[list[Path], list[int], list[str]]:
    """(image files, their labels, class names) of an ImageFolder tree, as torchvision's
    ImageFolder finds them: class = directory name (sorted), files with a known image suffix
    (sorted); a class directory without any is one line."""
    root = Path(source).expanduser()
    classes = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    files: list[Path] = []
    labels: list[int] = []
    for label, name in enumerate(classes):
        found = sorted(f for f in (root / name).iterdir()
                       if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
        if not found:
            raise UserError(f"{root / name}: no image file in this class directory (known "
                            f"suffixes: {', '.join(IMAGE_SUFFIXES)}); add images or remove it")
        files += found
        labels += [label] * len(found)
    return files, labels, classes


def ignored_files(source: str) -> list[Path]:
    """Files in the tree's class directories that are not images by their suffix."""
    root = Path(source).expanduser()
    return sorted(f for c in root.iterdir() if c.is_dir() and not c.name.startswith(".")
                  for f in c.iterdir()
                  if f.is_file() and f.suffix.lower() not in IMAGE_SUFFIXES)


def _decoded(path: Path):
    """The image at ``path`` fully decoded to RGB (a truncated or corrupt file is one line)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
        raise UserError(f"{path}: not a readable image ({exc}); remove or replace it") from None


def load_encoded(source: str, test_fraction: float = 0.2, seed: int = 0) -> EncodedSet:
    """An ImageFolder tree kept encoded, with the held-out split :func:`load` would give it
    (the same seeded stratified split, the same order). Every file is decoded once here, so a
    corrupt one is found now (one line naming it), not in a rank."""
    import numpy as np

    if detect(source) != "imagefolder":
        raise UserError(f"--format jpeg: {source} is not an ImageFolder tree "
                        f"(DIR/<class>/*.jpg); only such a tree is kept encoded")
    if not 0 < test_fraction < 1:
        raise UserError(f"--test-fraction {test_fraction}: must be between 0 and 1 (exclusive)")
    files, labels, classes = imagefolder_files(source)
    for f in files:
        _decoded(f)
    y = np.asarray(labels, dtype=np.int64)
    train, test = _split(y, test_fraction, seed)
    if len(train) == 0 or len(test) == 0:
        raise UserError(f"--from {source}: the {'training' if len(train) == 0 else 'held-out'} "
                        f"split is empty; give more images or another --test-fraction")
    return EncodedSet(kind="imagefolder", origin=ORIGIN["imagefolder"], classes=len(classes),
                      class_names=classes,
                      train=[(files[i], labels[i]) for i in train],
                      test=[(files[i], labels[i]) for i in test],
                      ignored=ignored_files(source))


# --- text: byte-level tokens --------------------------------------------------------------

# What ``--from text`` reads when it names nothing else: the Python standard library's own
# sources, on every machine orch runs on (real English comments and code, megabytes of it).
TEXT_SUFFIXES = (".txt", ".md", ".rst", ".py", ".tex", ".html", ".json", ".csv")


@dataclass
class TextSet:
    """Text as byte-level tokens (one token per byte, vocabulary 256): the training split
    and the held-out one (the corpus' last ``test_fraction``, so no sequence straddles)."""

    origin: str
    train: bytes
    test: bytes


def is_text(source: str) -> bool:
    return source == TEXT or source.startswith(TEXT + ":")


def text_files(source: str) -> tuple[list[Path], str]:
    """The files ``--from text[:PATH]`` reads, in a fixed order, and their origin."""
    if source == TEXT:
        import sys
        import sysconfig

        root = Path(sysconfig.get_paths()["stdlib"])
        files = sorted(p for p in root.glob("*.py") if p.is_file())
        return files, (f"the Python {sys.version.split()[0]} standard library's sources "
                       f"({root}/*.py), as bytes")
    path = Path(source[len(TEXT) + 1:]).expanduser()
    if path.is_file():
        return [path], f"{path.resolve()}, as bytes"
    if not path.is_dir():
        raise UserError(f"--from {source}: {path} is neither a file nor a directory")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
    if not files:
        raise UserError(f"--from {source}: no text files ({', '.join(TEXT_SUFFIXES)}) under "
                        f"{path}")
    return files, f"the text files under {path.resolve()}, as bytes"


def load_text(source: str, limit: int | None, test_fraction: float = 0.1) -> TextSet:
    """At most ``limit`` bytes of the text at ``source`` (all of it: None), split: the last
    ``test_fraction`` held out."""
    if not 0 < test_fraction < 1:
        raise UserError(f"--test-fraction {test_fraction}: must be between 0 and 1 (exclusive)")
    files, origin = text_files(source)
    chunks, size = [], 0
    for f in files:
        if limit is not None and size >= limit:
            break
        data = f.read_bytes()
        chunks.append(data)
        size += len(data)
    text = b"".join(chunks)[:limit]
    cut = int(len(text) * (1 - test_fraction))
    return TextSet(origin=origin, train=text[:cut], test=text[cut:])
