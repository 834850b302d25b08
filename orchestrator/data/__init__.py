"""On-disk data sets for measuring real input I/O (``orch data make``).

Synthetic data in memory hides the input pipeline (t_io ≈ 0). The source papers read each
framework's native format from disk; ``orch data make`` writes the same random images in the
formats the modes read, each in a subdirectory, with a manifest:

    DIR/manifest.json      dataset (cifar | imagenet), samples, formats, seed; for a real
                           data set also source, origin, classes, test_samples
    DIR/raw/               fixed-size binary records, CIFAR-10's layout (PyTorch modes)
    DIR/<format>/          further formats, written by the framework that reads them
    DIR/<format>/test/     the held-out split of a real data set, in the same format
    DIR/jpeg/              an ImageFolder tree's image files kept encoded (rankside.jpeg_shards):
                           the PyTorch modes decode each batch in their input pipeline, so
                           decoding is in t_io, as the first paper measures AlexNet's I/O

``orch data make --from SRC`` writes a real labelled data set instead: SRC is read
once by :mod:`orchestrator.data.sources` (``digits``, the embedded set, or a cluster's CIFAR,
MNIST or ImageFolder copy), written as ``raw`` records here, and every other format is
converted from those records by its framework — the same images, labels and order in all.

Writers run rank-side (orchestrator.rankside.datagen) in the Python of the environment whose
framework owns the format, so the control plane imports no framework.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .. import backends, files, modes, zoo
from ..errors import UserError
from ..modes.staging import stage_lib
from ..site import Site, envs
from ..yamlconf import read_text
from . import sources as datasources

MANIFEST = "manifest.json"


def format_environments() -> dict[str, str]:
    """format -> the site environment whose Python writes it: the environment of a mode that
    reads it (its ``data_format``), preferring the one named after the mode's library (torch
    over torch-mpi for raw records), and torch's among those: raw records are PyTorch's, and
    the modes that read them with numpy (cntk, chainermn) must not make writing them need
    their environments."""
    out: dict[str, str] = {}
    for mode in sorted(modes.registry().values(),
                       key=lambda m: (m.framework != m.library, m.library != "torch")):
        if mode.data_format:
            out.setdefault(mode.data_format, mode.framework)
    return out


FORMAT_ENV = format_environments()


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dataset: str
    samples: int = Field(ge=1)
    seed: int
    formats: list[str]
    # A real data set (``--from``); absent for random images.
    source: str | None = None
    origin: str | None = None
    classes: int | None = None
    test_samples: int = Field(default=0, ge=0)


def load_manifest(path: str | Path) -> tuple[Path, Manifest]:
    root = Path(path).expanduser().resolve()
    file = root / MANIFEST
    if not file.is_file():
        raise UserError(f"--data {path}: no {MANIFEST} there; make one with "
                        f"'orch data make --out {path}'")
    try:  # within yamlconf's limits: a manifest is a few hundred bytes (docs/limits.md)
        return root, Manifest.model_validate_json(read_text(file, "data manifest"))
    except ValueError as exc:
        why = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
        raise UserError(f"{file}: not an orch data manifest ({why})") from None


def make(out: Path, dataset: str, samples: int, formats: list[str], site: Site,
         seed: int = 0, log=print) -> Manifest:
    """Write ``samples`` random images of ``dataset`` in each format (skips existing ones)."""
    if dataset not in zoo.DATASETS:
        raise UserError(f"unknown dataset '{dataset}'; valid: {', '.join(zoo.DATASETS)}")
    if zoo.DATASETS[dataset].tokens:
        raise UserError(f"--dataset {dataset}: random tokens need no disk (a sweep without "
                        "--data trains on synthetic token batches); a real token set comes "
                        "from text: --from text")
    _check_formats(formats)
    if JPEG in formats:
        raise UserError("--format jpeg: only with --from an ImageFolder tree (random images "
                        "have no files to keep encoded)")
    if samples < 1:
        raise UserError("--samples: at least 1")
    want = Manifest(dataset=dataset, samples=samples, seed=seed, formats=[])
    return _write_formats(out.resolve(), want, formats, site, log,
                          ["--samples", str(samples), "--seed", str(seed)])


def make_from(out: Path, source: str, dataset: str, formats: list[str] | None, site: Site,
              test_fraction: float = 0.2, seed: int = 0, log=print,
              samples: int | None = None) -> Manifest:
    """Write the real labelled data set at ``source`` (or ``digits``) in each format, with its
    held-out split. ``formats`` None: ``jpeg`` for an ImageFolder tree (kept encoded, decoded
    by the ranks), ``raw`` for the others. Array formats always come with ``raw``, written
    first: the others convert from it."""
    if dataset not in zoo.DATASETS:
        raise UserError(f"unknown dataset '{dataset}'; valid: {', '.join(zoo.DATASETS)}")
    if datasources.is_text(source) or zoo.DATASETS[dataset].tokens:
        return make_text(out, source, dataset, formats, samples, test_fraction, log)
    kind = datasources.detect(source)
    if formats is None:
        formats = [JPEG] if kind == "imagefolder" else ["raw"]
    _check_formats(formats)
    out = out.resolve()
    encoded = None
    if JPEG in formats:
        encoded = datasources.load_encoded(source, test_fraction, seed)
        if encoded.ignored:
            names = ", ".join(str(f.name) for f in encoded.ignored[:3])
            log(f"{source}: left out {len(encoded.ignored)} file(s) that are not images by "
                f"their suffix ({names}{', …' if len(encoded.ignored) > 3 else ''}), as "
                f"torchvision's ImageFolder does")
    arrays = [f for f in formats if f != JPEG]
    real = None
    if arrays or encoded is None:
        ds = zoo.DATASETS[dataset]
        real = datasources.load(source, (ds.channels, ds.height, ds.width), test_fraction, seed)
    got = real or encoded
    # No cap on the class count: runs on this set give the models its count as their output
    # width (Run.classes, from the manifest; CIFAR-100: 100).
    samples, held = ((len(real.train_y), len(real.test_y)) if real is not None
                     else (len(encoded.train), len(encoded.test)))
    src = source if source == datasources.DIGITS else str(Path(source).expanduser().resolve())
    want = Manifest(dataset=dataset, samples=samples, seed=seed, formats=[],
                    source=src, origin=got.origin, classes=got.classes, test_samples=held)
    old = _existing(out, want)
    done = list(old.formats) if old else []
    if encoded is not None and JPEG not in done:
        _write_jpeg(out, encoded)
        done.append(JPEG)
        files.write_json_atomic(out / MANIFEST, _dump(want.model_copy(update={"formats": done})))
        log(f"jpeg: {want.samples} training and {want.test_samples} held-out image files of "
            f"{source}, kept encoded")
    if not arrays:
        return want.model_copy(update={"formats": done})
    if "raw" not in done:
        import numpy as np

        out.mkdir(parents=True, exist_ok=True)
        for sub, x, y in (("raw", real.train_x, real.train_y),
                          ("raw/test", real.test_x, real.test_y)):
            _write_raw_records(out / sub, x, y, np)
        done.append("raw")
        files.write_json_atomic(out / MANIFEST, _dump(want.model_copy(update={"formats": done})))
        log(f"raw: {want.samples} training and {want.test_samples} held-out images of "
            f"{real.origin}")
    rest = [f for f in arrays if f != "raw"]
    return _write_formats(out, want, ["raw", *rest], site, log, ["--from-raw", str(out / "raw")])


TOKENS_FILE = "tokens.bin"  # a token set's ``raw`` format: its tokens, one byte each


def make_text(out: Path, source: str, dataset: str, formats: list[str] | None,
              samples: int | None, test_fraction: float, log=print) -> Manifest:
    """A real token set from text on the machine (``--from text[:PATH]``): byte-level tokens
    in the ``raw`` format (``raw/tokens.bin`` and ``raw/test/tokens.bin``, one uint8 token per
    byte, read by the PyTorch modes' loader as sequences of the dataset's length and their
    next tokens). ``samples``: at most this many training sequences (default: all the text);
    ``test_fraction`` of the text's end is held out."""
    if not datasources.is_text(source):
        raise UserError(f"--dataset {dataset}: token sequences come from text: --from text "
                        f"(the Python standard library's sources) or --from text:PATH")
    ds = zoo.DATASETS[dataset]
    if not ds.tokens or ds.num_classes != 256:
        byte_sets = [n for n, d in zoo.DATASETS.items() if d.tokens and d.num_classes == 256]
        raise UserError(f"--from {source}: byte-level tokens make a dataset of 256 tokens "
                        f"({', '.join(byte_sets)}), not {dataset}: give --dataset "
                        f"{byte_sets[0]}")
    if formats not in (None, ["raw"]):
        raise UserError(f"--format {','.join(formats)}: a token set is written as raw "
                        "(the PyTorch modes read it)")
    if samples is not None and samples < 1:
        raise UserError("--samples: at least 1")
    limit = None if samples is None else math.ceil((samples * ds.seq_len + 1) /
                                                   (1 - test_fraction))
    text = datasources.load_text(source, limit, test_fraction)
    train, held = (len(text.train) - 1) // ds.seq_len, (len(text.test) - 1) // ds.seq_len
    if train < 1 or held < 1:
        raise UserError(f"--from {source}: {len(text.train) + len(text.test)} bytes of text "
                        f"make no {ds.seq_len}-token sequence in one of the splits")
    out = out.resolve()
    for sub, data in (("raw", text.train), ("raw/test", text.test)):
        (out / sub).mkdir(parents=True, exist_ok=True)
        files.replace_with(out / sub / TOKENS_FILE, lambda tmp, d=data: tmp.write_bytes(d))
    want = Manifest(dataset=dataset, samples=train, seed=0, formats=["raw"], source=source,
                    origin=text.origin, classes=ds.num_classes, test_samples=held)
    files.write_json_atomic(out / MANIFEST, _dump(want))
    log(f"raw: {len(text.train):,} training and {len(text.test):,} held-out byte tokens of "
        f"{text.origin}")
    return want


def _write_jpeg(out: Path, encoded) -> None:
    """The ``jpeg`` format (rankside.jpeg_shards): the tree's files as they are, split."""
    from ..rankside import jpeg_shards

    for sub, items in (("jpeg", encoded.train), ("jpeg/test", encoded.test)):
        jpeg_shards.write(str(out / sub), [(str(f), label) for f, label in items])
        (out / sub / "classes.txt").write_text("".join(f"{c}\n" for c in encoded.class_names))


def reading_format(mode, manifest: Manifest, pillow: bool = True) -> str | None:
    """The format of ``manifest``'s data set that ``mode``'s ranks read: ``jpeg`` (decoded in
    their input pipeline) where the set has it and the mode's rank side decodes it (``pillow``:
    its environment can), else the mode's own ``data_format`` if the set has it; None: the
    mode reads none of them."""
    if JPEG in manifest.formats and mode.library in JPEG_LIBRARIES and pillow:
        return JPEG
    return mode.data_format if mode.data_format in manifest.formats else None


def _site_format(site: Site, mode, manifest: Manifest) -> str | None:
    """:func:`reading_format` on ``site``: a mode whose environment lacks Pillow reads the
    set's decoded records where it has them (``--format jpeg,raw``), not the JPEG files."""
    fmt = reading_format(mode, manifest)
    if fmt == JPEG and not _has_pillow(site, mode.framework):
        return reading_format(mode, manifest, pillow=False) or fmt
    return fmt


def run_format(site: Site, mode, data_dir: str) -> str:
    """The format directory a run's ranks get (``--data DIR/<format>``): what
    :func:`check_reading` chose from the manifest the sweep checked, the mode's own format
    where none is there (any more)."""
    if not (Path(data_dir) / MANIFEST).is_file():
        return mode.data_format
    return _site_format(site, mode, load_manifest(data_dir)[1]) or mode.data_format


def check_reading(site: Site, mode, root: Path, manifest: Manifest) -> str:
    """The format ``mode`` will read from the data set at ``root``, or one line saying why it
    cannot: no format it reads, or JPEG to decode in an environment without Pillow."""
    ds = zoo.DATASETS.get(manifest.dataset)
    if ds is not None and ds.tokens and mode.library not in TOKEN_LIBRARIES:
        readers = sorted(m.name for m in modes.registry().values()
                         if m.library in TOKEN_LIBRARIES and m.data_format and m.phases)
        raise UserError(f"mode '{mode.name}' does not read token sets from disk ({root}): "
                        f"the modes that do are {', '.join(readers)}; without --data it "
                        "trains on synthetic token batches")
    fmt = _site_format(site, mode, manifest)
    if fmt is None:
        if JPEG in manifest.formats and mode.data_format:
            raise UserError(
                f"mode '{mode.name}' cannot decode the JPEG images of {root} in its input "
                f"pipeline (only {', '.join(_jpeg_modes())} can); add its '{mode.data_format}' "
                f"format, decoded at make time: 'orch data make --out {root} --from "
                f"{manifest.source} --format {','.join([*manifest.formats, mode.data_format])}'")
        again = f" --from {manifest.source}" if manifest.source else ""
        raise UserError(f"mode '{mode.name}' reads '{mode.data_format}' data; {root} has "
                        f"{', '.join(manifest.formats)}: run 'orch data make --out {root}"
                        f"{again} --format {mode.data_format}'")
    if fmt == JPEG and not _has_pillow(site, mode.framework):
        raise UserError(f"mode '{mode.name}' would decode the JPEG images of {root} with "
                        f"Pillow, which environment '{mode.framework}' of site '{site.name}' "
                        f"lacks: add pillow to that environment, or add decoded records it "
                        f"reads instead: 'orch data make --out {root} --from {manifest.source} "
                        f"--format {','.join([*manifest.formats, mode.data_format])}'")
    return fmt


# The model zoos whose rank-side input pipeline reads a token set's ``raw`` tokens.
TOKEN_LIBRARIES = ("torch",)
# The model zoos whose rank-side input pipeline (rankside/torch/datasets) decodes ``jpeg``.
JPEG = "jpeg"
JPEG_LIBRARIES = ("torch",)


def _jpeg_modes() -> list[str]:
    return sorted(m.name for m in modes.registry().values()
                  if m.library in JPEG_LIBRARIES and m.data_format)


@functools.cache
def _pillow_in(python: str, env_items: tuple) -> bool:
    proc = subprocess.run([python, "-c", "import PIL.Image"], capture_output=True,
                          env={**os.environ, **dict(env_items)}, timeout=120)
    return proc.returncode == 0


def _has_pillow(site: Site, framework: str) -> bool:
    """Whether the environment's Python imports Pillow, asked where it can run here (as
    envs.check asks for its Python); an environment only on the cluster's nodes or in an image
    is taken on trust (its rank would say so in its log)."""
    env = site.environment(framework)
    if env.container is not None:
        return True
    if not (backends.scheduler(site.scheduler).runs_here or env.build is not None):
        return True
    python = envs.python_of(env)
    if shutil.which(python) is None and not os.access(python, os.X_OK):
        return True  # envs.check says that it does not exist
    return _pillow_in(python, tuple(sorted(env.env.items())))


def _check_formats(formats: list[str]) -> None:
    for fmt in formats:
        if fmt not in FORMAT_ENV and fmt != JPEG:
            raise UserError(f"unknown data format '{fmt}'; valid: {', '.join(FORMAT_ENV)}, "
                            f"{JPEG} (an ImageFolder tree kept encoded, with --from)")


def _dump(manifest: Manifest) -> dict:
    # Fields at their defaults are left out: a random-image manifest reads as it always did.
    return json.loads(manifest.model_dump_json(exclude_defaults=True))


def _existing(out: Path, want: Manifest) -> Manifest | None:
    """The manifest already at ``out`` if it describes the same data set; another one is
    never overwritten."""
    if not (out / MANIFEST).is_file():
        return None
    _, old = load_manifest(out)
    same = ("dataset", "samples", "seed", "source", "test_samples")
    if any(getattr(old, k) != getattr(want, k) for k in same):
        what = f"{old.source} ({old.samples} images)" if old.source else \
            f"{old.samples} random {old.dataset} samples (seed {old.seed})"
        raise UserError(f"{out} already holds {what}; choose another --out")
    return old


def _write_formats(out: Path, want: Manifest, formats: list[str], site: Site, log,
                   source_args: list[str]) -> Manifest:
    """Each format not yet there, written by its framework's Python (rank-side datagen)."""
    old = _existing(out, want)
    done: list[str] = list(old.formats) if old else []
    out.mkdir(parents=True, exist_ok=True)
    lib = stage_lib(out)
    for fmt in formats:
        if fmt in done:
            log(f"{fmt}: already there")
            continue
        env = site.environment(FORMAT_ENV[fmt])
        envs.check(site, {FORMAT_ENV[fmt]})
        cmd = [envs.python_of(env), "-m", "orchestrator.rankside.datagen", "--format", fmt,
               "--dataset", want.dataset, *source_args, "--out", str(out / fmt)]
        log(f"{fmt}: writing {want.samples} {want.dataset} samples with {cmd[0]}")
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, **env.env, "PYTHONPATH": str(lib)})
        if proc.returncode != 0:
            raise UserError(f"writing {fmt} failed:\n{proc.stderr.strip()[-1500:]}")
        done.append(fmt)
        files.write_json_atomic(out / MANIFEST, _dump(want.model_copy(update={"formats": done})))
    return want.model_copy(update={"formats": done})


def _write_raw_records(out: Path, x, y, np) -> None:
    """``raw`` shards (label byte + CHW pixels), the layout rankside.datagen writes."""
    out.mkdir(parents=True, exist_ok=True)
    shard = 10_000
    for k, start in enumerate(range(0, len(y), shard)):
        n = min(shard, len(y) - start)
        records = np.empty((n, 1 + x[0].size), dtype=np.uint8)
        records[:, 0] = y[start:start + n]
        records[:, 1:] = x[start:start + n].reshape(n, -1)
        tmp = out / f".shard-{k:05d}.tmp"
        records.tofile(tmp)
        os.replace(tmp, out / f"shard-{k:05d}.bin")
