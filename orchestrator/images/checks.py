"""Before anything is written or submitted: every image the runs need exists, its runtime is
installed where that can be seen from here, and the runs' directories can be bound into it."""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .. import backends
from ..containers.base import Runtime, runtime
from ..errors import UserError
from ..site import Container, Site
from .image import ImageFacts, ImageTree, expand_image, inspect
from .specs import spec_names


def check(site: Site, runs: Iterable[Any], out: Path, lib: Path) -> dict[str, ImageFacts]:
    """Every container image the runs need exists and can run here: {framework: facts}.

    Raises UserError (exit 2) before anything is written or submitted: an image path that does
    not exist, a runtime missing on the local site or on Slurm nodes that are this machine
    (elsewhere job.sbatch checks with `command -v` before starting any rank), a run directory
    the runtime cannot bind.
    """
    facts: dict[str, ImageFacts] = {}
    by_fw: dict[str, list] = {}
    for run in runs:
        by_fw.setdefault(run.framework, []).append(run)
    for fw, fw_runs in sorted(by_fw.items()):
        c = site.environment(fw).container
        if c is None:
            continue
        where = f"environment '{fw}' of site '{site.name}'"
        _image_exists(c, fw, where)
        rt = runtime(c.runtime)
        _runtime_installed(site, rt, c, sorted({r.partition for r in fw_runs}), where)
        facts[fw] = inspect(c)
        if rt.binds_need_targets:
            tree = ImageTree(expand_image(c))
            for run in fw_runs:  # raises if a run's paths cannot be bound
                data = [run.data] if getattr(run, "data", None) else []
                rt.binds([str(out.resolve() / run.run_id), str(lib), *data], list(c.binds), tree)
    return facts


def _image_exists(c: Container, fw: str, where: str) -> None:
    image = expand_image(c)
    if not image.exists():
        hint = (f"build it with 'orch container build {fw} --runtime {c.runtime}'"
                if fw in _spec_names_quiet() else "build or copy it there")
        raise UserError(f"{where}: container image {image} does not exist; {hint}, or fix "
                        f"environments.{fw}.container.image")


def _runtime_installed(site: Site, rt: Runtime, c: Container, partitions: list[str],
                       where: str) -> None:
    """Where the partitions' nodes are this machine, the runtime must be installed here."""
    sched = backends.scheduler(site.scheduler)
    local = all(sched.nodes_are_this_machine(p) for p in partitions)
    if local and shutil.which(rt.command) is None:
        raise UserError(f"{where}: container runtime '{c.runtime}' ({rt.command}) is not "
                        f"installed on the nodes: {rt.install_hint}")


def _spec_names_quiet() -> list[str]:
    try:
        return spec_names()
    except UserError:
        return []
