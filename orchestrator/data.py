"""On-disk data sets for measuring real input I/O (``orch data make``).

Synthetic data in memory hides the input pipeline (t_io ≈ 0). The source papers read each
framework's native format from disk; ``orch data make`` writes the same random images in the
formats the modes read, each in a subdirectory, with a manifest:

    DIR/manifest.json      dataset (cifar | imagenet), samples, formats, seed
    DIR/raw/               fixed-size binary records, CIFAR-10's layout (PyTorch modes)
    DIR/<format>/          further formats, written by the framework that reads them

Writers run rank-side (orchestrator.rankside.datagen) in the Python of the environment whose
framework owns the format, so the control plane imports no framework.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from . import envs, files, modes, zoo
from .errors import UserError
from .site import Site
from .staging import stage_lib

MANIFEST = "manifest.json"


def format_environments() -> dict[str, str]:
    """format -> the site environment whose Python writes it: the environment of a mode that
    reads it (its ``data_format``), preferring the one named after the mode's library (torch
    over torch-mpi for raw records)."""
    out: dict[str, str] = {}
    for mode in sorted(modes.registry().values(), key=lambda m: m.framework != m.library):
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


def load_manifest(path: str | Path) -> tuple[Path, Manifest]:
    root = Path(path).expanduser().resolve()
    file = root / MANIFEST
    if not file.is_file():
        raise UserError(f"--data {path}: no {MANIFEST} there; make one with "
                        f"'orch data make --out {path}'")
    try:
        return root, Manifest.model_validate_json(file.read_bytes())
    except ValueError as exc:
        why = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
        raise UserError(f"{file}: not an orch data manifest ({why})") from None


def make(out: Path, dataset: str, samples: int, formats: list[str], site: Site,
         seed: int = 0, log=print) -> Manifest:
    """Write ``samples`` random images of ``dataset`` in each format (skips existing ones)."""
    if dataset not in zoo.DATASETS:
        raise UserError(f"unknown dataset '{dataset}'; valid: {', '.join(zoo.DATASETS)}")
    for fmt in formats:
        if fmt not in FORMAT_ENV:
            raise UserError(f"unknown data format '{fmt}'; valid: {', '.join(FORMAT_ENV)}")
    if samples < 1:
        raise UserError("--samples: at least 1")
    out = out.resolve()
    done: list[str] = []
    if (out / MANIFEST).is_file():
        _, old = load_manifest(out)
        if (old.dataset, old.samples, old.seed) != (dataset, samples, seed):
            raise UserError(f"{out} already holds {old.samples} {old.dataset} samples (seed "
                            f"{old.seed}); choose another --out")
        done = old.formats
    out.mkdir(parents=True, exist_ok=True)
    lib = stage_lib(out)
    for fmt in formats:
        if fmt in done:
            log(f"{fmt}: already there")
            continue
        env = site.environment(FORMAT_ENV[fmt])
        envs.check(site, {FORMAT_ENV[fmt]})
        cmd = [envs.python_of(env), "-m", "orchestrator.rankside.datagen", "--format", fmt,
               "--dataset", dataset, "--samples", str(samples), "--seed", str(seed),
               "--out", str(out / fmt)]
        log(f"{fmt}: writing {samples} {dataset} samples with {cmd[0]}")
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, **env.env, "PYTHONPATH": str(lib)})
        if proc.returncode != 0:
            raise UserError(f"writing {fmt} failed:\n{proc.stderr.strip()[-1500:]}")
        done.append(fmt)
        manifest = Manifest(dataset=dataset, samples=samples, seed=seed, formats=done)
        files.write_json_atomic(out / MANIFEST, json.loads(manifest.model_dump_json()))
    return Manifest(dataset=dataset, samples=samples, seed=seed, formats=done)
