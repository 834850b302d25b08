"""``orch data make``: on-disk data sets in each framework's native format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._common import err_console, group

app = group("On-disk data sets in each framework's native format.")


@app.command("make")
def data_make(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write (manifest + one "
                                      "dir per format).")],
    dataset: Annotated[str | None, typer.Option(
        help="cifar (32x32) or imagenet (224x224); bytes for --from text.")] = None,
    samples: Annotated[int | None, typer.Option(help="Number of random images (default "
                                                "10000); with --from text, at most this many "
                                                "training sequences.")] = None,
    source: Annotated[str | None, typer.Option(
        "--from", help="A real labelled data set instead of random images: 'digits' (the "
        "embedded UCI handwritten digits from scikit-learn) or a directory of CIFAR-10 python "
        "batches, MNIST idx files or an ImageFolder tree (DIR/<class>/*.jpg); or 'text' (byte "
        "tokens of the Python standard library's sources) or 'text:PATH' (a text file or a "
        "directory of them) for the language models.")] = None,
    test_fraction: Annotated[float | None, typer.Option(
        help="With --from: the share of each class held out for accuracy, where the data "
        "set has no test split of its own (default 0.2); of a text's end (default 0.1).")]
    = None,
    format: Annotated[str | None, typer.Option("--format", help="Formats, comma-separated: raw "
                      "(PyTorch), tfrecord, recordio, jpeg (an ImageFolder tree kept encoded, "
                      "decoded by the PyTorch modes' ranks). Default: jpeg for an ImageFolder "
                      "--from, else raw.")] = None,
    site: Annotated[str, typer.Option(help="Site whose environments write the formats.")]
    = "local",
    seed: Annotated[int, typer.Option(help="Random seed of the images and labels (with "
                                     "--from: of the held-out split).")] = 0,
) -> None:
    """Write a data set to disk in each framework's native format, so that sweeps with --data
    measure real input I/O: random images, or a real labelled set with a held-out split."""
    from .. import data as datamod
    from .. import site as sitemod
    from ..data import sources as datasources
    from ..errors import UserError
    from ..spec import settings

    s, _ = sitemod.load(site)
    formats = list(settings.parse_name_list(format)) if format is not None else None
    log = lambda m: err_console.print(m, highlight=False)  # noqa: E731
    text = source is not None and datasources.is_text(source)
    dataset = dataset or ("bytes" if text else "cifar")
    if source is None:
        manifest = datamod.make(out, dataset, 10000 if samples is None else samples,
                                formats or ["raw"], s, seed=seed, log=log)
    elif samples is not None and not text:
        raise UserError("--samples: not with --from (a real data set has the images it has)")
    else:
        manifest = datamod.make_from(out, source, dataset, formats, s,
                                     test_fraction=test_fraction or (0.1 if text else 0.2),
                                     seed=seed, log=log, samples=samples)
    held = f" (+{manifest.test_samples} held out)" if manifest.test_samples else ""
    err_console.print(f"{out}: {manifest.samples}{held} {manifest.dataset} samples in "
                      f"{', '.join(manifest.formats)}")
