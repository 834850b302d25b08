"""What is inside an image (its directories, its marker), and the facts a run records of it."""

from __future__ import annotations

import functools
import json
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..site import Container
from . import sif
from .digest import image_digest
from .specs import MARKER


class ImageTree:
    """Directories of an image (a directory, or a SquashFS file listed with unsquashfs)."""

    def __init__(self, image: Path) -> None:
        self.image = image
        self._dirs: dict[str, bool] | None = None  # squash: dir -> has entries
        if image.is_file():
            st = image.stat()
            self._dirs = _squash_dirs(str(image.resolve()), st.st_size, st.st_mtime_ns)

    def is_dir(self, p: str) -> bool:
        if self._dirs is not None:
            return p in self._dirs
        try:
            return stat.S_ISDIR(os.lstat(self.image / p.lstrip("/")).st_mode)
        except OSError:
            return False

    def is_empty_dir(self, p: str) -> bool:
        if self._dirs is not None:
            return p in self._dirs and not self._dirs[p]
        return self.is_dir(p) and not os.listdir(self.image / p.lstrip("/"))

    def read_marker(self) -> dict | None:
        try:
            if self._dirs is None:
                text = (self.image / MARKER.lstrip("/")).read_text()
            else:
                text = subprocess.run(["unsquashfs", "-cat", str(self.image), MARKER],
                                      capture_output=True, text=True, timeout=60).stdout
            return json.loads(text)
        except (OSError, ValueError, subprocess.SubprocessError):
            return None


@functools.lru_cache(maxsize=8)
def _squash_dirs(image: str, size: int, mtime_ns: int) -> dict[str, bool] | None:
    """{directory: has entries} of a SquashFS image, from ``unsquashfs -lls`` (1 s for the
    torch image; once per image version and process)."""
    if shutil.which("unsquashfs") is None:
        return None
    proc = subprocess.run(["unsquashfs", "-lls", "-d", "", str(image)], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        return None
    dirs: dict[str, bool] = {"/": False}
    for line in proc.stdout.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or parts[0][:1] not in "dl-bcps":
            continue
        name = parts[5].split(" -> ")[0]
        if not name.startswith("/"):
            continue
        parent = str(PurePosixPath(name).parent)
        dirs[parent] = True
        if parts[0].startswith("d"):
            dirs.setdefault(name, False)
    return dirs


def expand_image(container: Container) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(container.image)))


@dataclass(frozen=True)
class ImageFacts:
    """An environment's image as it is now: recorded in provenance.json, passed to the ranks."""

    runtime: str
    image: str
    digest: str
    kind: str  # "directory" | "file"
    spec: dict | None  # the image's /etc/orch-image.json, when orch built it
    built_with: str | None = None  # a SIF's: "siftool" (orch assembled it) or "apptainer build"

    def as_dict(self) -> dict:
        return {"runtime": self.runtime, "image": self.image, "digest": self.digest,
                "kind": self.kind, "spec": self.spec, "built_with": self.built_with}


def inspect(container: Container) -> ImageFacts:
    """The image's facts; a SIF's spec and how it was built come from its labels (its root
    filesystem is not unpacked for them)."""
    image = expand_image(container).resolve()
    common = {"runtime": container.runtime, "image": str(image), "digest": image_digest(image),
              "kind": "directory" if image.is_dir() else "file"}
    if sif.is_sif(image):
        return ImageFacts(**common, spec=sif.marker(image), built_with=sif.built_with(image))
    return ImageFacts(**common, spec=ImageTree(image).read_marker())
