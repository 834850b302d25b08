"""``orch container generate|build|list``, ``orch show`` and ``orch rerun``: reproducible runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import find_run, group, out_console
from ._common import log as _log

container_app = group("Framework environment images: generate their Apptainer/Charliecloud "
                      "build files from containers/specs/, build them, list them.")


@container_app.command("generate")
def generate(
    check: Annotated[bool, typer.Option("--check", help="Change nothing; exit 1 if a generated "
                                        "file differs from its spec.")] = False,
) -> None:
    """Write containers/<name>.def and containers/<name>.charliecloud.sh from every spec."""
    from ..images import recipes, specs

    changed = recipes.generate_all(check=check)
    for path in changed:
        _log(f"{'differs' if check else 'wrote'}: {path}")
    if check and changed:
        _log("generated container files are out of date: run 'orch container generate'")
        raise typer.Exit(1)
    if not changed:
        _log(f"up to date: {len(specs.spec_names())} spec(s) in "
             f"{specs.containers_dir() / 'specs'}")


@container_app.command("build")
def build(
    name: Annotated[str, typer.Argument(help="Image spec (containers/specs/NAME.yaml).")],
    runtime: Annotated[str, typer.Option(help="charliecloud, apptainer or singularity.")]
    = "charliecloud",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Directory for the image; "
                                             "default ~/.cache/orch/images.")] = None,
    squash: Annotated[bool, typer.Option(help="Charliecloud: also write a SquashFS file "
                                         "(IMAGE.sqfs) next to the directory.")] = False,
    force: Annotated[bool, typer.Option(help="Rebuild even if up to date.")] = False,
) -> None:
    """Build an image; print its path and digest. A SIF is built with apptainer (singularity)
    where it exists, else assembled with siftool from the Charliecloud build."""
    from ..containers import runtime_names
    from ..images import build as builds
    from ..images.digest import image_digest
    from ..images.specs import load_spec
    from ..runs import provenance

    if runtime not in runtime_names():
        raise UserError(f"--runtime {runtime}: valid: {', '.join(runtime_names())}")
    image = builds.build(load_spec(name), runtime, out, squash=squash, force=force, log=_log,
                         commit=provenance.orch_source()["git_commit"])
    _log(f"digest {image_digest(image)}")
    sys.stdout.write(f"{image}\n")


@container_app.command("list")
def list_images(
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Image directory; default "
                                             "~/.cache/orch/images.")] = None,
) -> None:
    """The image specs, their hashes, whether the current Charliecloud build exists, and each
    SIF file: its size, digest and how it was built (siftool, or apptainer build)."""
    from rich.table import Table

    from ..images import build as builds
    from ..images import specs

    table = Table("image", "framework", "spec sha256", "charliecloud image", "SIF", "size",
                  "SIF sha256", "built with", box=None)
    for name in specs.spec_names():
        spec = specs.load_spec(name)
        path = builds.directory_image_path(spec, out)
        built = path.is_dir() and (path / specs.MARKER.lstrip("/")).is_file()
        table.add_row(name, spec.framework, specs.spec_hash(spec)[:16],
                      str(path) if built else "[dim]not built[/]",
                      *_sif_columns(builds.sif_path_of(spec, out)))
    out_console.print(table)


def _sif_columns(path: Path) -> tuple[str, str, str, str]:
    """A SIF's path, size, digest (first 16 hex digits) and how it was built."""
    from ..images import sif
    from ..images.digest import image_digest

    if not sif.is_sif(path):
        return ("[dim]not built[/]", "", "", "")
    size = f"{path.stat().st_size / 2**20:,.0f} MiB"
    return (str(path), size, image_digest(path).removeprefix("sha256:")[:16],
            sif.built_with(path))


def show(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="Run id.")],
    directory: Annotated[Path | None, typer.Argument(
        metavar="SWEEP", help="Its sweep directory; default: search runs/*/.",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Everything, as JSON.")] = False,
    old_dir: Annotated[Path | None, typer.Option("--dir", hidden=True)] = None,
) -> None:
    """A run's provenance: image and digest, orch commit, site config hash, scripts, ranks."""
    from ..runs import provenance

    info = provenance.show(find_run("show", run_id, directory, old_dir))
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(provenance.format_show(info))


def rerun(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="Run id.")],
    directory: Annotated[Path | None, typer.Argument(
        metavar="SWEEP", help="Its sweep directory; default: search runs/*/.",
        show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Sweep directory for the "
                                             "rerun; default <sweep>/reruns/<n>.")] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the run (Slurm).")]
    = True,
    old_dir: Annotated[Path | None, typer.Option("--dir", hidden=True)] = None,
) -> None:
    """Submit a run again from its record alone, into <sweep>/reruns/<n>/ (never over it).

    Once it ran, it says whether its result falls inside the original's spread (orch
    compare's test)."""
    from .. import backends, execute, results
    from ..runs import provenance
    from . import history

    src = find_run("rerun", run_id, directory, old_dir)
    prepared, site = provenance.prepare_rerun(src, out)
    sweep_dir = prepared.rdir.parent
    _log(f"rerun of {src} -> {prepared.rdir}")
    execute.execute([prepared], site, wait=wait, on_event=_event)
    if not wait and not backends.scheduler(site.scheduler).sequential:
        _log(f"submitted; follow with: orch status {sweep_dir}")
        return
    keys = results.recheck(sweep_dir)  # the run records first: merge only reads
    recs = results.records(results.merge(sweep_dir, keys))
    for rec in recs:
        rate = rec.get("samples_per_s")
        _log(f"{rec['run_id']}: {rec['state']}"
             + (f", {rate:,.0f} samples/s" if rate else "")
             + (f" ({rec['reason'].splitlines()[0]})" if rec.get("reason") else ""))
    for line in history.gathered(sweep_dir):  # inside the original's spread, or not
        _log(line)
    sys.stdout.write(f"{prepared.rdir}\n")
    if any(rec["state"] != "COMPLETED" for rec in recs):
        raise typer.Exit(1)


def _event(run, record) -> None:
    job = f" job {record.job_id}" if record.job_id else ""
    _log(f"  {run.run_id}{job} {record.state}")
