"""A run with the names it carries resolved once: its site, partition, environment and mode.

A Run is plain data (it is written to run.json and read back); the stages after the plan need
the objects its names stand for. :meth:`ResolvedRun.of` looks them up once, and rendering,
provenance and submission read them from it instead of asking the site and the registries again
at every step.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import modes
from ..site import Environment, Partition, Site
from ..spec.api import Run


@dataclass(frozen=True)
class ResolvedRun:
    run: Run
    site: Site
    partition: Partition
    environment: Environment
    mode: modes.Mode

    @classmethod
    def of(cls, run: Run, site: Site) -> ResolvedRun:
        return cls(run, site, site.partition(run.partition), site.environment(run.framework),
                   modes.get(run.mode))
