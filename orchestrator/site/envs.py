"""Framework environments: where each framework's Python is, and building it when orch owns it.

Frameworks pin conflicting versions (MXNet needs numpy 1.23, TensorFlow a newer one, CNTK
Python 3.6), so each gets its own venv. A site config describes it (``venv`` + ``build``, the
build usually a framework environment's name, defined once in ``frameworks/<name>.yaml``);
``orch env build NAME`` creates it once and stamps it with a hash of the resolved description,
so a changed description rebuilds and an unchanged one is skipped, wherever it is written (a
site config that copies a framework's fields inline gets the same stamp). Before anything is
submitted, :func:`check` makes sure every environment a sweep needs is there, naming it if not,
and :func:`check_runs` that it holds what each run's mode needs (its Python modules, the
launcher's program) where that can be seen from here.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .. import backends, modes
from ..errors import UserError
from ..resources import data_dir
from ..spec.api import Run
from . import Environment, Site

STAMP = ".orch-env.json"


def expand(path: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(path)))


def python_of(env: Environment) -> str:
    """The interpreter ranks of this environment run."""
    if env.python:
        return str(expand(env.python)) if env.python.startswith(("~", "$", "/")) else env.python
    if env.venv:
        return str(expand(env.venv) / "bin" / "python")
    return sys.executable


def spec_hash(env: Environment) -> str:
    """The build's stamp: a hash of what it is made of (Python, packages, pip flags, steps),
    not of where it is written."""
    data = env.build.described() if env.build else {}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def build_source(env: Environment) -> str:
    """Where an environment's build is defined: 'frameworks/<name>.yaml', 'inline' (in the
    site config), or '-' when orch does not build it."""
    if env.build is None:
        return "-"
    return env.build.source or "inline"


def is_built(env: Environment) -> bool:
    if env.build is None or env.venv is None:
        return True
    stamp = expand(env.venv) / STAMP
    if not stamp.is_file():
        return False
    try:
        return json.loads(stamp.read_text()).get("spec") == spec_hash(env)
    except (OSError, ValueError):
        return False


def find_python(version: str) -> str:
    """``pythonX.Y`` from PATH, else the newest pyenv install of that version.

    A pyenv shim on PATH for a version that is installed but not active fails when run
    ("pyenv: python3.6: command not found"): such a shim is skipped for the install itself.
    """
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:
        return found
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = sorted(glob.glob(str(root / "versions" / f"{version}.*" / "bin" /
                                      f"python{version}")),
                        key=lambda p: [int(x) for x in Path(p).parts[-3].split(".")
                                       if x.isdigit()])
    if candidates:
        return candidates[-1]
    raise UserError(f"Python {version} is not installed (no python{version} on PATH, none "
                    f"under {root / 'versions'}); install it, e.g. 'pyenv install {version}'")


def build(name: str, env: Environment, force: bool = False, log=print) -> Path:
    """Create the environment's venv and install it; a no-op if its stamp is current."""
    if env.build is None or env.venv is None:
        raise UserError(f"environment '{name}' has no 'build' section: orch does not manage it")
    venv = expand(env.venv)
    if is_built(env) and not force:
        log(f"{name}: up to date ({venv})")
        return venv
    spec = env.build
    try:
        base = find_python(spec.python)
    except UserError as exc:
        raise UserError(f"building environment '{name}': {exc}") from None
    started = time.time()
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log(f"{name}: creating {venv} with {base}")
    _run([base, "-m", "venv", str(venv)], name)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # Python 3.6's bundled pip (18.1) ignores Requires-Python on a local index and would pick
    # a pip that needs 3.10: cap it at 21.3.1, the last pip for 3.6.
    old_python = tuple(int(x) for x in spec.python.split(".")) < (3, 7)
    _run([*pip, "--upgrade", "pip<22" if old_python else "pip"], name)
    if spec.packages:
        log(f"{name}: pip install {' '.join(spec.packages)}")
        _run([*pip, *spec.pip_args, *spec.packages], name)
    step_env = {**os.environ, "VENV": str(venv), "PYTHON": python,
                "PIP": " ".join(pip), "ORCH_ENV_SCRIPTS": str(data_dir("templates") / "envs")}
    for step in spec.steps:
        log(f"{name}: {step}")
        _run(["bash", "-euo", "pipefail", "-c", step], name, env=step_env)
    stamp = {"spec": spec_hash(env), "built_at": time.time(), "base_python": base,
             "seconds": round(time.time() - started, 1), "build": spec.model_dump(mode="json")}
    (venv / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    log(f"{name}: built in {stamp['seconds']} s")
    return venv


def _run(cmd: list[str], name: str, env: dict | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        out = (proc.stdout + proc.stderr).strip().splitlines()
        excerpt = "\n".join(out[-15:])
        raise UserError(f"building environment '{name}' failed at: {' '.join(cmd)}\n{excerpt}")


def broken_shims(venv: Path) -> list[tuple[Path, str]]:
    """Soname shims a build step made in the venv (``lib/mpi-shim``, CNTK's Open MPI 1.10
    names) whose targets are gone, e.g. Open MPI was removed after the build."""
    shim = venv / "lib" / "mpi-shim"
    if not shim.is_dir():
        return []
    return [(link, os.readlink(link)) for link in sorted(shim.iterdir())
            if link.is_symlink() and not link.exists()]


def check(site: Site, frameworks: set[str]) -> None:
    """Every environment the sweep needs exists: raise (before submitting) naming it if not."""
    for fw in sorted(frameworks):
        env = site.environment(fw)
        if env.build is not None and not is_built(env):
            raise UserError(f"environment '{fw}' of site '{site.name}' is not built (or its "
                            f"description changed): run 'orch env build {fw} --site "
                            f"{site.name}'")
        if env.venv is not None and env.build is not None:
            for link, target in broken_shims(expand(env.venv)):
                raise UserError(f"environment '{fw}' of site '{site.name}': {link} points to "
                                f"{target}, which does not exist (install openmpi-bin/"
                                f"libopenmpi-dev or run scripts/testcluster up, then "
                                f"'orch env build {fw} --site {site.name} --force')")
        if backends.scheduler(site.scheduler).runs_here or env.build is not None:
            python = python_of(env)
            if shutil.which(python) is None and not os.access(python, os.X_OK):
                raise UserError(f"environment '{fw}' of site '{site.name}': python '{python}' "
                                f"does not exist")


# Looks for top-level modules without importing them (importing torch or TensorFlow takes
# seconds): prints the names not found, space-separated.
_FIND_MODULES = ("import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
                 "if importlib.util.find_spec(m) is None))")


def reachable(site: Site, env: Environment) -> bool:
    """Can this machine see the environment the ranks will run in? Where the scheduler runs
    here, or orch builds it (a shared venv); not inside a container image, nor where the
    site's ``module load`` lines make it (they are loaded on the nodes only)."""
    return (backends.scheduler(site.scheduler).runs_here or env.build is not None) \
        and env.container is None and not env.modules


def missing_modules(env: Environment, names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` that the environment's Python cannot import; [] when it cannot tell
    (an interpreter that fails to run the probe: the ranks' own output will say why)."""
    try:
        proc = subprocess.run([python_of(env), "-c", _FIND_MODULES, *names],
                              capture_output=True, text=True, env={**os.environ, **env.env},
                              check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.split() if proc.returncode == 0 else []


def check_runs(site: Site, runs: list[Run]) -> None:
    """:func:`check` the runs' environments, then refuse (one line) a run whose mode's Python
    modules or launcher program are missing where this machine can see them."""
    check(site, {r.framework for r in runs})
    needs: dict[str, set[str]] = {}
    for run in runs:
        needs.setdefault(run.framework, set()).update(modes.get(run.mode).needs)
        command = backends.launcher(run.launcher).command
        if command and backends.scheduler(site.scheduler).runs_here and not shutil.which(command):
            raise UserError(f"launcher '{run.launcher}' of run {run.run_id}: '{command}' is "
                            f"not on PATH here")
    for fw, names in sorted(needs.items()):
        env = site.environment(fw)
        if not reachable(site, env):
            continue
        missing = missing_modules(env, tuple(sorted(names)))
        if missing:
            wanted = sorted({r.mode for r in runs if r.framework == fw
                             and set(modes.get(r.mode).needs) & set(missing)})
            raise UserError(f"environment '{fw}' of site '{site.name}' lacks Python module(s) "
                            f"{', '.join(missing)} that mode(s) {', '.join(wanted)} need "
                            f"(python '{python_of(env)}')")
