"""Parameter counts of every zoo model as each framework builds it (``orch models``).

The catalogue (zoo.py) says what each model must have; this asks each framework environment
of a site to build the models and count, so that one table shows the same network in every
framework — or which one differs. The control plane imports no framework: the counting runs
in the environment's Python (orchestrator.rankside.count_params). Results are cached per
environment and rank-side code, since building ImageNet models takes a while.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from .. import modes, zoo
from ..modes.staging import stage_lib
from ..site import Site, envs

# The frameworks whose model zoos are counted: every library a mode builds its models with,
# counted in the site environment of the same name (torch, tensorflow, mxnet, cntk, chainer).
FRAMEWORKS = tuple(dict.fromkeys(m.library for m in modes.registry().values()
                                 if m.framework == m.library))


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "orch"


def counts_for(site: Site, framework: str, log=print) -> dict | str:
    """{model: {dataset: params}} from the framework's environment, or why there are none."""
    if framework not in site.environments:
        return "no environment on this site"
    env = site.environment(framework)
    if not envs.is_built(env):
        return f"environment not built (orch env build {framework})"
    python = envs.python_of(env)
    if not Path(python).exists():
        return f"python {python} not found"
    lib = stage_lib(cache_dir())
    key = hashlib.sha256(f"{python}|{envs.spec_hash(env)}|{lib.name}".encode()).hexdigest()
    cached = cache_dir() / "param-counts" / f"{framework}-{key[:16]}.json"
    if cached.is_file():
        return json.loads(cached.read_text())["counts"]
    run_env = {**os.environ, **env.env, "PYTHONPATH": str(lib)}
    shim = Path(python).parent.parent / "lib" / "mpi-shim"  # CNTK's Open MPI 1.10 names
    if shim.is_dir():
        run_env["LD_LIBRARY_PATH"] = f"{shim}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    log(f"{framework}: building every model in {python} to count its parameters")
    proc = subprocess.run([python, "-m", "orchestrator.rankside.count_params", "--framework",
                           framework], capture_output=True, text=True, env=run_env,
                          timeout=1200)
    if proc.returncode != 0:
        return "counting failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(result) + "\n")
    return result["counts"]


def table(site: Site, frameworks: tuple[str, ...] = FRAMEWORKS, log=print) -> list[dict]:
    """One record per model: expected counts, each framework's counts, and whether all agree."""
    per_fw = {fw: counts_for(site, fw, log) for fw in frameworks}
    out = []
    for spec in zoo.MODELS.values():
        rec = {"model": spec.name, "title": spec.title, "datasets": list(spec.datasets),
               "params": dict(spec.expected_params), "frameworks": {}, "missing": {}}
        for fw, counts in per_fw.items():
            if isinstance(counts, str):
                rec["missing"][fw] = counts
            elif spec.name in counts:
                rec["frameworks"][fw] = counts[spec.name]
            else:
                rec["missing"][fw] = "not implemented in this framework"
        rec["agree"] = all(c.get(ds) == n for c in rec["frameworks"].values()
                           for ds, n in rec["params"].items() if ds in c)
        out.append(rec)
    return out
