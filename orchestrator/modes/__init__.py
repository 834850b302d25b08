"""The mode registry: one folder per mode under ``orchestrator/modes/``.

Each folder holds ``mode.py`` (``MODE = Mode(...)``, see :mod:`.base`), ``launch.sh.j2`` and
``rank.py``; the registry finds the folders, so adding a mode edits nothing else. Loading
checks each folder and names what is missing.

Rank-side processes import this package too (it is the parent of every ``rank.py``): it must
stay importable by any Python a rank runs (3.6 for CNTK), so stdlib only and no
``from __future__ import annotations``.
"""

import importlib
import os
import pkgutil

from ..errors import UserError
from .base import OVERLAPS, PATTERNS, Mode, Option, Task, workers_only

__all__ = ["OVERLAPS", "PATTERNS", "Mode", "ModeDefinitionError", "Option", "Task", "get",
           "network_benchmark", "registry", "workers_only"]

_HERE = os.path.dirname(os.path.abspath(__file__))
REQUIRED_FILES = ("mode.py", "launch.sh.j2", "rank.py")
_REGISTRY = None


class ModeDefinitionError(RuntimeError):
    """A mode folder is incomplete or its descriptor is wrong: a bug in orch, not user input."""


def _load(package):
    folder = os.path.join(_HERE, package)
    missing = [f for f in REQUIRED_FILES if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise ModeDefinitionError(f"mode folder orchestrator/modes/{package}/ lacks "
                                  f"{', '.join(missing)} (a mode is mode.py + launch.sh.j2 + "
                                  "rank.py)")
    module = importlib.import_module(f"{__name__}.{package}.mode")
    mode = getattr(module, "MODE", None)
    if not isinstance(mode, Mode):
        raise ModeDefinitionError(f"orchestrator/modes/{package}/mode.py defines no "
                                  "MODE = Mode(...)")
    mode.package = package
    return mode


def registry():
    """Every mode by name, sorted; loaded once per process."""
    global _REGISTRY
    if _REGISTRY is None:
        modes = {}
        for info in pkgutil.iter_modules([_HERE]):
            if not info.ispkg:
                continue
            mode = _load(info.name)
            if mode.name in modes:
                raise ModeDefinitionError(f"two mode folders declare the name '{mode.name}': "
                                          f"{modes[mode.name].package} and {info.name}")
            modes[mode.name] = mode
        _REGISTRY = dict(sorted(modes.items()))
    return _REGISTRY


def network_benchmark(mpi=False):
    """The mode that measures the network instead of training (``trains=False``) through the
    library a training mode of that ``mpi`` communicates with: torch.distributed's
    (``allreduce-bench``, what ``orch netbench`` runs) or MPI's (``mpi-allreduce-bench``). A
    training mode's own benchmark is ``network_benchmark(mode.mpi)``."""
    found = [m for m in registry().values() if not m.trains and bool(m.mpi) == bool(mpi)]
    if len(found) != 1:
        raise ModeDefinitionError(f"expected one network benchmark mode (trains=False) with "
                                  f"mpi={bool(mpi)}, found "
                                  f"{', '.join(m.name for m in found) or 'none'}")
    return found[0]


def get(name):
    modes = registry()
    if name not in modes:
        raise UserError("unknown mode '{}'; valid: {}".format(name, ", ".join(modes)))
    return modes[name]


def epoch_modes():
    """The names of the modes that train whole epochs and report held-out accuracy."""
    return [name for name, mode in registry().items() if mode.epochs]
