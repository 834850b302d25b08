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
    dataset: Annotated[str, typer.Option(help="cifar (32x32) or imagenet (224x224).")] = "cifar",
    samples: Annotated[int, typer.Option(help="Number of images.")] = 10000,
    format: Annotated[str, typer.Option("--format", help="Formats, comma-separated: raw "
                                        "(PyTorch), tfrecord, recordio.")] = "raw",
    site: Annotated[str, typer.Option(help="Site whose environments write the formats.")]
    = "local",
    seed: Annotated[int, typer.Option(help="Random seed of the images and labels.")] = 0,
) -> None:
    """Write random images to disk so that sweeps with --data measure real input I/O."""
    from .. import data as datamod
    from .. import site as sitemod
    from .. import sweep as sweepmod

    s, _ = sitemod.load(site)
    manifest = datamod.make(out, dataset, samples, list(sweepmod.parse_name_list(format)), s,
                            seed=seed, log=lambda m: err_console.print(m, highlight=False))
    err_console.print(f"{out}: {manifest.samples} {manifest.dataset} samples in "
                      f"{', '.join(manifest.formats)}")
