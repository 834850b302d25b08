"""The container runtime interface and its registry.

A runtime (Apptainer, Singularity, Charliecloud) starts a rank's Python inside an image. Each
is one registered class that declares what differs between them; code elsewhere asks the
registry for a runtime by name and reads its declarations, and never compares a runtime name
itself (the schedulers and launchers of :mod:`orchestrator.backends` are registered the same
way).

Site configs are validated against the registered names, so this module sits just above the
ground floor: it imports no orch module above ``errors``.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from ..errors import UserError

_RUNTIMES: dict[str, Runtime] = {}


class ImageDirs(Protocol):
    """The directories of an image, as far as binding into it needs them
    (:class:`orchestrator.images.image.ImageTree`)."""

    image: object

    def is_dir(self, p: str) -> bool: ...

    def is_empty_dir(self, p: str) -> bool: ...


class Runtime:
    """How one container runtime starts an image, and how its images are built.

    Declarations the rest of orch reads (instead of comparing names):

    * ``command``: the executable it is started with (checked with ``command -v`` on nodes);
    * ``env_prefix``: variables set outside as ``<prefix>NAME`` reach the container as
      ``NAME`` ('': the wrapper passes them on the command line instead);
    * ``builds``: the image format ``orch container build`` makes for it: ``"sif"`` (one
      file, from the Apptainer definition) or ``"directory"`` (a tree, from the Charliecloud
      build script, no registry);
    * ``squashes``: a directory image can also be packed into one SquashFS file it runs;
    * ``binds_need_targets``: a bind's destination must already be a directory of the
      (read-only) image, so :meth:`binds` needs the image's directories;
    * ``install_hint``: what to do where its executable is missing;
    * ``recipe_template``: the template of the file its images are built from
      (:meth:`recipe`; ``orch container generate`` writes it for every spec).
    """

    name: ClassVar[str] = ""
    command: ClassVar[str] = ""
    env_prefix: ClassVar[str] = ""
    builds: ClassVar[str] = "sif"
    squashes: ClassVar[bool] = False
    binds_need_targets: ClassVar[bool] = False
    recipe_template: ClassVar[str] = ""

    @property
    def install_hint(self) -> str:
        return f"install {self.command} on the nodes, or load its module in the environment"

    def recipe(self, spec_name: str) -> str:
        """The generated file (under ``containers/``) an image of the spec is built from."""
        raise NotImplementedError

    def build_command(self, image: str, recipe: str, wheel_dir: str) -> list[str]:
        """The command line that builds ``image`` from the recipe file."""
        raise NotImplementedError

    def binds(self, paths: list[str], extra: list[str], tree: ImageDirs | None) -> list[str]:
        """The bind mounts that make ``paths`` (run directory, staged code, data) visible at
        the same place inside the image, then the site's ``extra`` SRC[:DST] binds. ``tree``:
        the image's directories (None: the image is not there, as in a dry run). Raises
        UserError where a path cannot be bound."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"Runtime({self.name!r})"


def register_runtime(cls: type[Runtime]) -> type[Runtime]:
    """Class decorator: one instance of ``cls`` becomes the runtime named ``cls.name``."""
    if not cls.name or cls.name in _RUNTIMES:
        raise RuntimeError(f"container runtime {cls.__name__}: empty or duplicate name "
                           f"{cls.name!r}")
    _RUNTIMES[cls.name] = cls()
    return cls


def runtime(name: str) -> Runtime:
    try:
        return _RUNTIMES[name]
    except KeyError:
        raise UserError(f"unknown container runtime '{name}'; valid: "
                        f"{', '.join(_RUNTIMES)}") from None


def runtime_names() -> tuple[str, ...]:
    """In registration order (apptainer, singularity, charliecloud): the order users read."""
    return tuple(_RUNTIMES)
