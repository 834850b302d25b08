"""The user's own model (``--model FILE.py:FUNCTION`` or ``--model package.module:FUNCTION``),
checked before anything is submitted.

The control plane imports no framework: the check runs in the torch environment's Python
(``orchestrator.rankside.torch.workload --check``), which builds the model, runs one training
step on a small batch and reports the parameter count (the communication model's gradient
bytes), the training FLOPs per sample (MFU's numerator) and the file's sha256 (the run's id and
provenance change with the file). An import error, a function that returns no
``torch.nn.Module``, a shape mismatch: one line located in the user's file, exit 2, before any
job exists. Where the environment cannot run here (only on the cluster's nodes, or in an
image), the ranks find such errors in their own log instead, and the counts are unknown.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import modes
from ..errors import UserError
from ..modes.staging import stage_lib
from ..site import Site, envs

# The model libraries whose ranks train a user's module (rankside/torch/workload.py).
LIBRARIES = ("torch",)
CHECK_BATCH = 2  # samples of the checking step: enough to catch a shape mismatch


def is_user_model(name: str) -> bool:
    """Zoo names have no colon; FILE.py:FUNCTION and package.module:FUNCTION have one."""
    return ":" in name


def resolve(name: str, base: Path | None = None) -> str:
    """``FILE.py:FUNCTION`` with the file's absolute path (ranks start elsewhere); a module's
    name as given."""
    target, _, function = name.rpartition(":")
    if target.endswith(".py"):
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        return f"{path.resolve()}:{function}"
    return name


@dataclass(frozen=True)
class Facts:
    """What the check found: None where it could not run here."""

    params: int | None
    flops_per_sample: int | None
    sha256: str | None
    checked: bool


def file_sha256(name: str) -> str | None:
    target = name.rpartition(":")[0]
    if not target.endswith(".py"):
        return None
    try:
        return hashlib.sha256(Path(target).read_bytes()).hexdigest()
    except OSError:
        return None


def check(site: Site, mode_list: list[modes.Mode], name: str, dataset: str,
          where: str) -> Facts:
    """Check the user's model in the environment of the sweep's torch modes (every mode must
    be one: MXNet, CNTK, Chainer and TensorFlow ranks cannot train a torch.nn.Module)."""
    others = [m.name for m in mode_list if m.library not in LIBRARIES]
    if others:
        having = [m.name for m in modes.registry().values()
                  if m.library in LIBRARIES and m.trains and m.phases]
        raise UserError(f"{where}: a user's model runs in the PyTorch modes ({', '.join(having)}),"
                        f" not in {', '.join(others)}")
    env = site.environment(mode_list[0].framework)
    python = envs.python_of(env)
    if not envs.reachable(site, env) or not (os.access(python, os.X_OK)
                                             or "/" not in python):
        return Facts(None, None, file_sha256(name), False)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "orch"
    lib = stage_lib(cache)
    out = _run_check(python, str(lib), tuple(sorted(env.env.items())), name, dataset,
                     file_sha256(name))
    if isinstance(out, str):
        raise UserError(f"{where}: {out}")
    return Facts(out.get("params"), out.get("flops_per_sample"), out.get("sha256"), True)


@functools.lru_cache(maxsize=32)
def _run_check(python: str, lib: str, env_items: tuple, name: str, dataset: str,
               digest: str | None) -> dict | str:
    """The check's JSON, or its one-line error (functools caches it: a sweep asks once per
    model and dataset, however many modes and sizes it has; ``digest``, the file's sha256,
    keys it to the file's content)."""
    cmd = [python, "-m", "orchestrator.rankside.torch.workload", "--check", name,
           "--dataset", dataset, "--batch-size", str(CHECK_BATCH)]
    run_env = {**os.environ, **dict(env_items), "PYTHONPATH": lib}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=lib,
                              timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"could not check the model with {python}: {exc}"
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["the check failed with no message"]
        return lines[-1]
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"the model check printed no result ({proc.stdout.strip()[-200:]!r})"
