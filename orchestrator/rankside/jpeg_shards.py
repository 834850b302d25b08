"""orch's ``jpeg`` format: encoded images kept encoded, decoded by the ranks.

The first source paper finds AlexNet's I/O time in decoding JPEG files in the input pipeline;
``raw`` records (already decoded at ``orch data make`` time) would hide it. So an ImageFolder
tree (``DIR/<class>/<image>.jpg``, torchvision's layout) is stored with each file's bytes as they
are, and a rank decodes every batch it reads (Pillow), in its I/O phase:

    jpeg/shard-00000.jpegs   the image files of up to 10,000 images, concatenated as they are
                             (``dd`` a slice out and it is the original .jpg/.png again)
    jpeg/index.npy           int64 [N, 4]: shard, byte offset, byte length, label, per image
    jpeg/classes.txt         the class (directory) names, one a line, in label order
    jpeg/test/...            the held-out split, the same layout

Decoding is deterministic and the same as ``orch data make`` applies when it writes ``raw``
from the same tree (:func:`fit`): RGB; an image larger than the dataset's shape is resized to it
(bilinear); a smaller one is scaled up by an integer factor (nearest neighbour) and padded.

numpy + stdlib at import, Pillow inside the functions that decode; valid Python 3.6 (any
framework's Python can read it if it has Pillow). The control plane writes it with :func:`write`.
"""

import io
import os

import numpy as np

FORMAT = "jpeg"
INDEX = "index.npy"
SHARD_IMAGES = 10000


def write(out, items):
    """Write ``items`` — (path of an image file, label) in order — as jpeg shards in ``out``."""
    os.makedirs(out, exist_ok=True)
    index = np.zeros((len(items), 4), dtype=np.int64)
    for shard, start in enumerate(range(0, len(items), SHARD_IMAGES)):
        tmp = os.path.join(out, f".shard-{shard:05d}.tmp")
        offset = 0
        with open(tmp, "wb") as fh:
            for k in range(start, min(start + SHARD_IMAGES, len(items))):
                path, label = items[k]
                with open(path, "rb") as src:
                    data = src.read()
                fh.write(data)
                index[k] = (shard, offset, len(data), label)
                offset += len(data)
        os.replace(tmp, os.path.join(out, f"shard-{shard:05d}.jpegs"))
    tmp = os.path.join(out, ".index.tmp.npy")
    np.save(tmp, index)
    os.replace(tmp, os.path.join(out, INDEX))


def is_jpeg_dir(root):
    return os.path.isfile(os.path.join(root, INDEX))


class JpegShards:
    """Random access to one split: ``len``, ``labels`` and ``image(i)`` — uint8 CHW at
    ``shape``, decoded from the stored bytes on every call (no cache: decoding is the I/O)."""

    def __init__(self, root, shape):
        self.root, self.shape = root, tuple(shape)
        path = os.path.join(root, INDEX)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no {INDEX} under {root} (not an orch jpeg directory)")
        self.index = np.load(path)
        self.labels = self.index[:, 3].copy()
        self._shards = {}  # opened lazily: a DataLoader worker opens its own maps

    def __len__(self):
        return len(self.index)

    def encoded(self, i):
        shard, offset, length, _ = (int(v) for v in self.index[i])
        mm = self._shards.get(shard)
        if mm is None:
            mm = np.memmap(os.path.join(self.root, f"shard-{shard:05d}.jpegs"), dtype=np.uint8,
                           mode="r")
            self._shards[shard] = mm
        return bytes(mm[offset:offset + length])

    def image(self, i):
        from PIL import Image

        with Image.open(io.BytesIO(self.encoded(i))) as img:
            rgb = np.asarray(img.convert("RGB"))
        return fit(rgb.transpose(2, 0, 1)[None], self.shape)[0]


def fit(x, shape):
    """uint8 ``[N, C, H, W]`` at ``shape`` (C, H, W): channels repeated (grey -> RGB), an
    integer nearest-neighbour scale-up then centred zero padding, or a bilinear resize when the
    image is larger. The one rule for every image orch brings to a dataset's shape."""
    c, h, w = shape
    xc, xh, xw = x.shape[1:]
    if xc != c:
        x = np.repeat(x, c // xc, axis=1)
    if (xh, xw) != (h, w):
        factor = min(h // xh, w // xw)
        if factor >= 1:
            if factor > 1:
                x = x.repeat(factor, axis=2).repeat(factor, axis=3)
            ph, pw = h - x.shape[2], w - x.shape[3]
            x = np.pad(x, ((0, 0), (0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2)))
        else:
            x = _resize(x, h, w)
    return np.ascontiguousarray(x, dtype=np.uint8)


def _resize(x, h, w):
    from PIL import Image

    out = np.empty((x.shape[0], x.shape[1], h, w), dtype=np.uint8)
    for i, img in enumerate(x):
        pil = Image.fromarray(np.moveaxis(img, 0, -1).squeeze())
        arr = np.asarray(pil.resize((w, h), Image.BILINEAR))
        out[i] = arr.reshape(h, w, -1).transpose(2, 0, 1)
    return out
