"""A SIF file without Apptainer: the spec's root filesystem (the Charliecloud build's tree and
its SquashFS), the layout Apptainer 1.x reads inside an image added, packed as the primary
system partition of a new SIF file with ``siftool`` (the SIF reference implementation, Debian
package ``siftool``), beside the definition file and the labels.

What Apptainer needs in the root filesystem (its source, ``internal/pkg/build/files`` and the
starter): ``/bin/sh``; ``/.singularity.d/env/*.sh``, sourced in order when present; an
executable ``/.singularity.d/runscript`` for ``apptainer run``; ``/.singularity.d/labels.json``
for ``apptainer inspect``; and the directories it mounts onto (``MOUNT_POINTS``). The layout is
appended to a copy of the tree's SquashFS (``mksquashfs`` appends in well under a second where
packing the tree again takes a minute), so the image holds exactly the Charliecloud image's
files plus ``/.singularity.d``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import UserError
from ..site import check_env_names
from . import sif
from .specs import ImageSpec, marker

# Where Apptainer mounts the host's directories (and its own): it needs them in the image.
MOUNT_POINTS = ("dev", "proc", "sys", "tmp", "var/tmp", "home", "etc", "root")
# Each tool and the Debian 12 package that installs it.
TOOLS = {"siftool": "siftool", "mksquashfs": "squashfs-tools"}
BUILT_WITH = "siftool"  # the org.orch.built-with label of a SIF orch assembled itself


def check_tools(spec: ImageSpec, definition: str) -> None:
    """Both tools on PATH, or one line naming the Debian packages to install (exit 2)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        packages = " ".join(dict.fromkeys(TOOLS[t] for t in missing))
        raise UserError(f"{' and '.join(missing)} not installed, so '{spec.name}.sif' cannot "
                        f"be assembled without apptainer: apt-get install -y "
                        f"--no-install-recommends {packages} (or, where apptainer exists: "
                        f"'apptainer build {spec.name}.sif containers/{definition}')")


def labels(spec: ImageSpec, build_key: str, commit: str | None) -> dict[str, str]:
    """The image's labels (``/.singularity.d/labels.json`` and the SIF's JSON.Labels object):
    orch's provenance of it, named as the definition file's %labels name them."""
    out = {"org.label-schema.schema-version": "1.0",
           "org.label-schema.build-arch": sif.ARCH_NAMES.get(arch_code(), "unknown"),
           "org.orch.image": spec.name, "org.orch.framework": spec.framework,
           "org.orch.spec-sha256": json.loads(marker(spec))["spec_sha256"],
           "org.orch.build-key": build_key, "org.orch.built-with": BUILT_WITH,
           "org.orch.commit": commit or "unknown", "org.orch.marker": marker(spec)}
    for req in spec.pip.local + spec.pip.index:
        name, _, version = req.partition("==")
        out[f"org.orch.version.{name.strip().lower()}"] = version.strip()
    return out


def arch_code() -> int:
    machine = platform.machine()
    if machine not in sif.ARCHS:
        raise UserError(f"this machine's architecture {machine} has no SIF code; valid: "
                        f"{', '.join(sif.ARCHS)}")
    return sif.ARCHS[machine]


def environment_script(spec: ImageSpec) -> str:
    """``/.singularity.d/env/90-environment.sh``: the spec's environment, as Apptainer writes
    a definition's %environment there. Values are quoted: a spec cannot run code through it."""
    lines = ["#!/bin/sh", f"# The environment of image '{spec.name}' "
             f"(containers/specs/{spec.name}.yaml), sourced by Apptainer at every start."]
    for key, value in spec.image_env():
        try:  # checked when the spec was read too; a spec built in code is checked here
            check_env_names({key: value})
        except ValueError:
            raise UserError(f"containers/specs/{spec.name}.yaml: env: '{key}' is not a "
                            f"variable name (letters, digits and _, not first a digit); "
                            f"rename it") from None
        lines.append(f"export {key}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


RUNSCRIPT = ("#!/bin/sh\n# apptainer run IMAGE ARGS...: the image's Python with ARGS "
             "(orch itself runs 'apptainer exec IMAGE python3 ...').\nexec python3 \"$@\"\n")


def layout(spec: ImageSpec, tree: Path, definition: str, image_labels: dict[str, str]
           ) -> dict[str, tuple[str | None, int]]:
    """{path under /: (text, mode)} to add to the tree; text None: an empty directory."""
    files: dict[str, tuple[str | None, int]] = {
        ".singularity.d": (None, 0o755), ".singularity.d/env": (None, 0o755),
        ".singularity.d/env/90-environment.sh": (environment_script(spec), 0o755),
        ".singularity.d/runscript": (RUNSCRIPT, 0o755),
        ".singularity.d/labels.json": (_labels_json(image_labels), 0o644),
        ".singularity.d/Singularity": (definition, 0o644)}
    for d in MOUNT_POINTS:  # the debootstrapped tree has them all; a custom base might not
        if not (tree / d).is_dir():
            files[d] = (None, 0o755)
    return files


def _labels_json(image_labels: dict[str, str]) -> str:
    return json.dumps(image_labels, indent=1, sort_keys=True) + "\n"


def _write_layer(layer: Path, files: dict[str, tuple[str | None, int]]) -> None:
    for rel, (text, mode) in sorted(files.items()):
        path = layer / rel
        if text is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        path.chmod(mode)


def pack_rootfs(base_sqfs: Path, files: dict[str, tuple[str | None, int]], dest: Path) -> None:
    """``dest``: a copy of the tree's SquashFS with the layout appended (owned by root)."""
    shutil.copyfile(base_sqfs, dest)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".sif-layer-") as layer:
        # Appending takes the root directory's mode from the source: not mkdtemp's 0700,
        # which would keep every user but root out of the image.
        Path(layer).chmod(0o755)
        _write_layer(Path(layer), files)
        _run(["mksquashfs", layer, str(dest), "-all-root", "-no-recovery", "-no-progress",
              "-quiet"], "mksquashfs (appending the Apptainer layout)")


def assemble(sif_path: Path, definition: Path, rootfs: Path, image_labels: dict[str, str]
             ) -> None:
    """``siftool new``, then the definition, the root filesystem as the primary system
    partition (SquashFS, this machine's architecture) and the labels, in that order."""
    labels_file = sif_path.with_name(sif_path.name + ".labels.json")
    labels_file.write_text(_labels_json(image_labels))
    try:
        _run(["siftool", "new", str(sif_path)], "siftool new")
        _run(["siftool", "add", str(sif_path), str(definition), "--datatype", "1",
              "--filename", definition.name], "siftool add (definition)")
        _run(["siftool", "add", str(sif_path), str(rootfs), "--datatype", "4", "--parttype",
              "2", "--partfs", "1", "--partarch", str(arch_code()), "--filename",
              "rootfs.squashfs"], "siftool add (root filesystem)")
        _run(["siftool", "add", str(sif_path), str(labels_file), "--datatype", "3",
              "--filename", "labels.json"], "siftool add (labels)")
    finally:
        labels_file.unlink(missing_ok=True)


def verify(sif_path: Path, rootfs: Path) -> sif.Descriptor:
    """The SIF has one primary system partition, SquashFS of this architecture, whose bytes
    are the root filesystem's: raises UserError otherwise."""
    part = sif.primary_partition(sif_path)
    want = sif.ARCH_NAMES[arch_code()]
    if part is None or part.fs != "Squashfs" or part.arch != want:
        raise UserError(f"{sif_path}: no primary system partition (SquashFS, {want}): "
                        f"{part}")
    if _sha256(sif_path, part.offset, part.size) != _sha256(rootfs, 0, rootfs.stat().st_size):
        raise UserError(f"{sif_path}: its primary partition differs from {rootfs}")
    return part


def _sha256(path: Path, offset: int, size: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        fh.seek(offset)
        while size > 0:
            chunk = fh.read(min(size, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            size -= len(chunk)
    return h.hexdigest()


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"{what} failed: {(proc.stderr or proc.stdout).strip()[-800:]}")


def build_sif(spec: ImageSpec, tree: Path, base_sqfs: Path, definition: Path, sif_path: Path,
              image_labels: dict[str, str]) -> Path:
    """``sif_path`` from the tree and its SquashFS. The root filesystem it packs is a working
    file, removed once the SIF holds it (verified byte for byte): no run reads it, and the
    SIF gives it back (``siftool dump`` of the primary partition). Written under temporary
    names and moved into place last: an interrupted build leaves the previous image as it
    was."""
    tmp_rootfs = sif_path.with_name(sif_path.name + ".rootfs.sqfs.partial")
    tmp_sif = sif_path.with_name(sif_path.name + ".partial")
    for p in (tmp_rootfs, tmp_sif):
        p.unlink(missing_ok=True)
    try:
        pack_rootfs(base_sqfs, layout(spec, tree, definition.read_text(), image_labels),
                    tmp_rootfs)
        assemble(tmp_sif, definition, tmp_rootfs, image_labels)
        verify(tmp_sif, tmp_rootfs)
        os.replace(tmp_sif, sif_path)
        # the copy earlier builds kept beside the SIF described the SIF just replaced
        sif_path.with_name(sif_path.name + ".rootfs.sqfs").unlink(missing_ok=True)
    finally:
        for p in (tmp_rootfs, tmp_sif):
            p.unlink(missing_ok=True)
    return sif_path
