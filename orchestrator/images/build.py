"""``orch container build``: an image of a spec for a runtime, made in the format the runtime
declares (``Runtime.builds``): a SIF file (``apptainer build`` of the definition where Apptainer
exists, else assembled with ``siftool`` from the directory build, :mod:`.sifbuild`), or a
directory tree from the Charliecloud build script (optionally packed into SquashFS). Builds are
cached by their build script, so an unchanged spec costs nothing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ..containers.base import Runtime, runtime, runtime_names
from ..errors import UserError
from . import sif, sifbuild, specs
from .digest import cache_dir
from .recipes import generate
from .specs import MARKER, ImageSpec

Log = Callable[[str], None]


def default_image_dir() -> Path:
    return cache_dir() / "images"


def build(spec: ImageSpec, runtime_name: str, out: Path | None = None, squash: bool = False,
          force: bool = False, log: Log = print, commit: str | None = None) -> Path:
    """Build the spec's image for the runtime where the runtime (or its build tools) exists;
    ``squash``: also pack a directory image into one SquashFS file, where the runtime runs
    those; ``commit``: orch's git commit, labelled into a SIF orch assembles. Returns the
    image's path."""
    rt = runtime(runtime_name)
    image = _BUILDERS[rt.builds](spec, rt, out, force, log, commit)
    if squash and rt.squashes:
        return squash_image(spec, image, force, log)
    return image


def build_key(spec: ImageSpec) -> str:
    """What a directory build is cached by: the generated build script (spec hash inside)."""
    script = generate(spec)[runtime_building("directory").recipe(spec.name)]
    return hashlib.sha256(script.encode()).hexdigest()[:12]


def runtime_building(image_format: str) -> Runtime:
    """The first registered runtime whose images are built in this format."""
    return next(runtime(n) for n in runtime_names() if runtime(n).builds == image_format)


def directory_image_path(spec: ImageSpec, out: Path | None = None) -> Path:
    """Where the spec's current directory image is (or would be) built."""
    return (out or default_image_dir()).expanduser().resolve() / f"{spec.name}-{build_key(spec)}"


def sif_path_of(spec: ImageSpec, out: Path | None = None) -> Path:
    """Where the spec's SIF file is (or would be) built: NAME.sif, whatever built it."""
    return (out or default_image_dir()).expanduser().resolve() / f"{spec.name}.sif"


def _build_directory(spec: ImageSpec, rt: Runtime, out: Path | None, force: bool,
                     log: Log, commit: str | None = None) -> Path:
    """The spec's directory image (debootstrap + chroot, as root), reused while its name
    carries the current build key: a changed spec (or generator) builds a new one."""
    image = directory_image_path(spec, out)
    script = specs.containers_dir() / rt.recipe(spec.name)
    _check_directory_build(spec, script)
    if force and image.exists():
        shutil.rmtree(image)
    if (image / MARKER.lstrip("/")).is_file():
        log(f"{spec.name}: up to date ({image})")
        return image
    image.parent.mkdir(parents=True, exist_ok=True)
    if image.exists():  # an interrupted build
        shutil.rmtree(image)
    log(f"{spec.name}: building {image} (debootstrap + chroot, no registry)")
    started = time.time()
    proc = subprocess.run(rt.build_command(str(image), str(script), spec.pip.wheel_dir),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise UserError(f"building image '{spec.name}' failed ({script}):\n{tail}")
    (image.parent / f"{image.name}.build.log").write_text(proc.stdout + proc.stderr)
    log(f"{spec.name}: built in {time.time() - started:.0f} s")
    return image


def _check_directory_build(spec: ImageSpec, script: Path) -> None:
    """A directory build needs its script as generated now, root, debootstrap and chroot."""
    if not script.is_file() or script.read_text() != generate(spec)[script.name]:
        raise UserError(f"{script} is missing or out of date with containers/specs/"
                        f"{spec.name}.yaml: run 'orch container generate'")
    if os.geteuid() != 0:
        raise UserError("building a Charliecloud image needs root (debootstrap, chroot); run "
                        "'orch container build' as root, or build elsewhere and copy the image")
    missing = [t for t in ("debootstrap", "chroot") if shutil.which(t) is None]
    if missing:
        raise UserError(f"{', '.join(missing)} not installed: apt-get install -y "
                        f"--no-install-recommends debootstrap")


def squash_image(spec: ImageSpec, image: Path, force: bool = False, log: Log = print) -> Path:
    """``IMAGE.sqfs`` beside a directory image: what `ch-convert -i dir -o squash` does
    (ch-convert ships in charliecloud-builders, which pulls docker.io): mksquashfs of the
    tree, owned by root, device nodes excluded."""
    sqfs = image.with_name(image.name + ".sqfs")
    if sqfs.is_file() and not force:
        log(f"{spec.name}: up to date ({sqfs})")
        return sqfs
    if shutil.which("mksquashfs") is None:
        raise UserError("mksquashfs not installed: apt-get install -y --no-install-recommends "
                        "squashfs-tools")
    tmp = sqfs.with_name(sqfs.name + ".partial")
    tmp.unlink(missing_ok=True)
    started = time.time()
    proc = subprocess.run(["mksquashfs", str(image), str(tmp), "-noappend", "-all-root",
                           "-no-progress", "-quiet", "-wildcards", "-e", "dev/*"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise UserError(f"mksquashfs failed: {(proc.stderr or proc.stdout).strip()[-800:]}")
    os.replace(tmp, sqfs)
    log(f"{spec.name}: SquashFS {sqfs} in {time.time() - started:.0f} s")
    return sqfs


def _build_sif(spec: ImageSpec, rt: Runtime, out: Path | None, force: bool, log: Log,
               commit: str | None) -> Path:
    """``IMAGE.sif``: ``<command> build`` where the runtime exists, else assembled with siftool
    from the directory build."""
    definition = specs.containers_dir() / rt.recipe(spec.name)
    sif_path = sif_path_of(spec, out)
    if shutil.which(rt.command) is None:
        return _assemble_sif(spec, definition, sif_path, out, force, log, commit)
    sif_path.parent.mkdir(parents=True, exist_ok=True)
    log(f"{spec.name}: {rt.command} build {sif_path} {definition}")
    proc = subprocess.run(rt.build_command(str(sif_path), str(definition), spec.pip.wheel_dir),
                          cwd=specs.containers_dir().parent)
    if proc.returncode != 0:
        raise UserError(f"{rt.command} build failed (exit {proc.returncode})")
    return sif_path


def _assemble_sif(spec: ImageSpec, definition: Path, sif_path: Path, out: Path | None,
                  force: bool, log: Log, commit: str | None) -> Path:
    """The SIF of the directory build and its SquashFS (both cached), reused while its
    build-key label is the current one."""
    sifbuild.check_tools(spec, definition.name)
    if not definition.is_file() or definition.read_text() != generate(spec)[definition.name]:
        raise UserError(f"{definition} is missing or out of date with containers/specs/"
                        f"{spec.name}.yaml: run 'orch container generate'")
    key = build_key(spec)
    if not force and _sif_key(sif_path) == key:
        log(f"{spec.name}: up to date ({sif_path})")
        return sif_path
    tree = _build_directory(spec, runtime_building("directory"), out, False, log)
    base = squash_image(spec, tree, False, log)
    started = time.time()
    sifbuild.build_sif(spec, tree, base, definition, sif_path,
                       sifbuild.labels(spec, key, commit))
    log(f"{spec.name}: SIF {sif_path} (siftool, no apptainer here) in "
        f"{time.time() - started:.0f} s")
    return sif_path


def _sif_key(sif_path: Path) -> str | None:
    """The build key an existing SIF was assembled for (None: none, or not readable)."""
    try:
        return sif.labels(sif_path).get("org.orch.build-key") if sif.is_sif(sif_path) else None
    except UserError:
        return None  # a damaged file: built again


# How each image format a runtime declares (Runtime.builds) is built.
_BUILDERS: dict[str, Callable[[ImageSpec, Runtime, Path | None, bool, Log, str | None],
                               Path]] = {
    "directory": _build_directory,
    "sif": _build_sif,
}
