"""Charliecloud: ``ch-run`` on a directory image (or its SquashFS file), built without any
registry by ``containers/<name>.charliecloud.sh`` (debootstrap + chroot).

Charliecloud bind mounts need their destination to exist in the (read-only) image. Run
directories are bound at their own absolute path so that every path in the rendered scripts
means the same inside and out: a path under ``/tmp`` needs nothing (ch-run shares the host's
``/tmp``); any other path is reached by binding its longest ancestor that is an *empty*
directory of the image, which the spec's ``mount_points`` create (``/work``, ``/scratch`` ...).
A non-empty ancestor (``/opt``, holding the image's venv) is refused: binding over it would
hide the image's own files.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from ..errors import UserError
from .base import ImageDirs, Runtime, register_runtime


@register_runtime
class Charliecloud(Runtime):
    name = "charliecloud"
    command = "ch-run"
    env_prefix = ""  # ch-run takes each variable as --set-env=NAME=VALUE
    builds = "directory"
    squashes = True
    binds_need_targets = True
    recipe_template = "containers/charliecloud-build.sh.j2"

    @property
    def install_hint(self) -> str:
        return "apt-get install -y --no-install-recommends charliecloud-runtime"

    def recipe(self, spec_name: str) -> str:
        return f"{spec_name}.charliecloud.sh"

    def build_command(self, image: str, recipe: str, wheel_dir: str) -> list[str]:
        return ["bash", recipe, image, wheel_dir]

    def binds(self, paths: list[str], extra: list[str], tree: ImageDirs | None) -> list[str]:
        """``SRC:DST`` arguments of ``-b`` that make ``paths`` visible at the same place."""
        explicit = [b for b in extra if ":" in b]
        paths = [*paths, *(b for b in extra if ":" not in b)]
        chosen = [_mount_point(p, tree) for p in paths]
        outer: list[str] = []
        for b in sorted({c for c in chosen if c is not None}, key=len):
            if not any(_under(b, o) for o in outer):
                outer.append(b)
        return [f"{b}:{b}" for b in sorted(outer)] + explicit


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _mount_point(path: str, tree: ImageDirs | None) -> str | None:
    """The image directory to bind ``path``'s ancestor onto (None: under /tmp, shared)."""
    p = os.path.normpath(os.path.expanduser(path))
    if _under(p, "/tmp"):
        return None  # the wrapper makes ch-run share the host's /tmp as /tmp
    ancestors = [str(a) for a in PurePosixPath(p).parents if str(a) != "/"][::-1]
    ancestors.append(p)
    if tree is None:  # image not there (dry run): the top directory, as the build makes it
        return ancestors[0]
    inside = [a for a in ancestors if tree.is_dir(a)]
    if not inside:
        raise UserError(
            f"Charliecloud cannot bind {p}: the image {tree.image} has no "
            f"{ancestors[0]} to mount it on; add '{ancestors[0]}' to the spec's "
            f"mount_points and rebuild, or put the sweep under /tmp or a mount point")
    chosen = inside[-1]
    if not tree.is_empty_dir(chosen):
        raise UserError(
            f"Charliecloud cannot bind {p}: its nearest directory in the image, "
            f"{chosen}, holds image files that a bind would hide; add a mount point "
            f"for it to the spec (e.g. '{ancestors[min(len(ancestors) - 1, 1)]}'), or "
            f"put the sweep under /tmp or one of the image's empty mount points")
    return chosen
