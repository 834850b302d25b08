"""Apptainer and its predecessor Singularity: one SIF file, built from ``containers/<name>.def``.

Both create a missing bind destination themselves (underlay/overlay), so a path is bound as it
is, and both let variables set outside as ``<PREFIX>NAME`` through ``--cleanenv``. Debian 12
packages neither: here their command lines are tested against a stand-in executable.
"""

from __future__ import annotations

from .base import ImageDirs, Runtime, register_runtime


@register_runtime
class Apptainer(Runtime):
    name = "apptainer"
    command = "apptainer"
    env_prefix = "APPTAINERENV_"
    builds = "sif"
    recipe_template = "containers/apptainer.def.j2"

    @property
    def install_hint(self) -> str:
        return f"{self.name} is not packaged for Debian 12; use runtime charliecloud here"

    def recipe(self, spec_name: str) -> str:
        return f"{spec_name}.def"

    def build_command(self, image: str, recipe: str, wheel_dir: str) -> list[str]:
        # The definition copies the wheels itself (%files): no wheel directory argument.
        return [self.command, "build", "--force", image, recipe]

    def binds(self, paths: list[str], extra: list[str], tree: ImageDirs | None) -> list[str]:
        return [*paths, *extra]


@register_runtime
class Singularity(Apptainer):
    name = "singularity"
    command = "singularity"
    env_prefix = "SINGULARITYENV_"
