"""Shared fixtures: run the real ``orch`` CLI, and reach the real test Slurm cluster.

Slurm-backed tests need ``scripts/testcluster up`` (root). Under ``CI=true`` a missing cluster
is a test failure, never a skip: CI must prove the Slurm paths for real.

A test that starts ``orch`` as a process (``run_orch``, or ``python -m orchestrator`` through
``subprocess``), itself or through a helper or fixture, is marked ``orch_process`` at collection
(see ``pytest_collection_modifyitems``): ``-m "not orch_process"`` leaves the in-process tests.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest_plugins = ["pytester"]  # test_conftest runs the collection hook on a test file of its own

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def run_orch(*args: str, timeout: float = 600, check: bool = False, cwd: Path | None = None,
             env: dict[str, str] | None = None):
    """Run ``orch`` as a user would (a separate process) and return the CompletedProcess."""
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"orch {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of the functions, lambdas and comprehensions defined in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def starts_orch(func, seen: set | None = None) -> bool:
    """Whether calling ``func`` may start ``orch`` as a process: it names ``run_orch`` or holds
    both ``"-m"`` and ``"orchestrator"`` (a ``python -m orchestrator`` command line), or calls a
    function of the test suite (a helper in its module, conftest's) that does. Read from the
    code, not run: a test that starts orch only on some path is marked too."""
    seen = set() if seen is None else seen
    code = getattr(func, "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    codes = list(_code_objects(code))
    consts = {c for co in codes for c in co.co_consts if isinstance(c, str)}
    if {"-m", "orchestrator"} <= consts:
        return True
    names = {n for co in codes for n in co.co_names}
    if "run_orch" in names:
        return True
    # only the suite's own helpers are followed: the package under test never starts itself
    return any(starts_orch(func.__globals__[n], seen) for n in names
               if _is_test_helper(func.__globals__.get(n), func.__module__))


def _is_test_helper(obj, module: str) -> bool:
    """Whether ``obj`` is a function of the test module ``module``, of this file or of another
    module of the test suite."""
    where = getattr(obj, "__module__", None) or ""
    return where in (module, __name__) or where.startswith("tests.")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``orch_process`` every test that starts orch as a process, itself or through one of
    its fixtures (a module fixture that runs a sweep)."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        defs = fixtures.name2fixturedefs.values() if fixtures else ()
        funcs = [getattr(item, "function", None), *(d.func for ds in defs for d in ds)]
        if any(starts_orch(f) for f in funcs if f is not None):
            item.add_marker(pytest.mark.orch_process)


LOCAL = yaml.safe_load((ROOT / "site-configs" / "local.yaml").read_text())


@pytest.fixture(autouse=True, scope="session")
def _shipped_sites_only(tmp_path_factory):
    """A test's ``local`` or ``testcluster`` is the shipped one: neither the user's own sites
    (~/.config/orch/sites) nor $ORCH_SITE_PATH of the shell that runs the tests shadow it;
    nor is the user's history (~/.local/share/orch/history, $ORCH_HISTORY) read or written;
    nor the user's netbench store (~/.cache/orch/netbench: the pre-flight's cache and the
    model errors that widen later predictions' intervals). A module's fixture, set up before
    any test's own store (_own_netbench_store), shares the session's store with the others."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ORCH_SITE_PATH", raising=False)
        mp.delenv("ORCH_HISTORY", raising=False)
        mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("xdg-config")))
        mp.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
        mp.setenv("ORCH_NETBENCH_DIR", str(tmp_path_factory.mktemp("netbench-session")))
        yield


_STORES = itertools.count()


@pytest.fixture(autouse=True)
def _own_netbench_store(tmp_path_factory, monkeypatch):
    """Each test has a netbench store of its own ($ORCH_NETBENCH_DIR, made when written): the
    user's pre-flight cache is never read, and the model errors a test's scorecard records
    (model-error-<site>.jsonl) never reach the user's cache or another test's predictions."""
    monkeypatch.setenv("ORCH_NETBENCH_DIR",
                       str(tmp_path_factory.getbasetemp() / f"netbench-{next(_STORES)}"))


def orch(*args: object) -> tuple[int, str, str]:
    """``orch ARGS`` in this process: (exit code, stdout, stderr). Any exception other than
    SystemExit propagates: a traceback fails the test."""
    from orchestrator import cli

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["orch", *map(str, args)]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return code, out.getvalue(), err.getvalue()


def site_file(tmp: Path, edit, name: str = "fz") -> Path:
    """The local site config, its torch environment running /bin/true, changed by ``edit``
    (a function of the parsed YAML), written to ``tmp/NAME.yaml``."""
    data = json.loads(json.dumps(LOCAL))
    data["name"] = name
    data["environments"] = {"torch": {"python": "/bin/true", "env": {"OMP_NUM_THREADS": "1"}}}
    edit(data)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


# Edits of a site config for site_file: one field of the first partition, of its sbatch
# options, of the torch environment, or of that environment's container.
def edit_partition(key, value):
    def edit(d):
        d["partitions"][0][key] = value
    return edit


def edit_sbatch(key, value):
    def edit(d):
        d["partitions"][0].setdefault("sbatch", {})[key] = value
    return edit


def edit_environment(key, value):
    def edit(d):
        d["environments"]["torch"][key] = value
    return edit


def edit_container(key, value):
    def edit(d):
        c = {"image": "/nonexistent/img.sif", "runtime": "apptainer"}
        c[key] = value
        d["environments"]["torch"]["container"] = c
    return edit


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory) -> Path:
    """A local sweep of one finished run (1 node, 3 iterations): tests copy it, then damage
    or change the copy."""
    out = tmp_path_factory.mktemp("base") / "sweep"
    run_orch("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--out", out,
             check=True)
    return out


def rank0_log(rdir: Path) -> Path:
    """Rank 0's log in run directory ``rdir``."""
    return rdir / "ranks" / "rank-0.jsonl"


def built_python(name: str, hint: str = "") -> str:
    """The Python of the local site's environment ``name`` once it is built; a skip without it,
    a failure under CI (make test builds every environment). ``hint``: what building it
    takes, when that is more than a minute."""
    from orchestrator import site as sitemod
    from orchestrator.site import envs

    env = sitemod.load("local")[0].environment(name)
    if not envs.is_built(env):
        problem = (f"the {name} environment is not built ({envs.expand(env.venv)}): run "
                   f"'.venv/bin/orch env build {name}' (or 'make envs'){hint}")
        if IN_CI:
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    return envs.python_of(env)


GOLDEN = ROOT / "tests" / "golden"
UPDATE_GOLDEN = os.environ.get("ORCH_UPDATE_GOLDEN") == "1"


def check_golden(name: str, text: str) -> None:
    """``text`` is golden file ``tests/golden/NAME``; ``ORCH_UPDATE_GOLDEN=1`` rewrites it."""
    path = GOLDEN / name
    if UPDATE_GOLDEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with ORCH_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


def rendered(site_name, partition, mode, nodes=2, **spec):
    """(run, its rendered files) for one run of ``mode`` on a site's partition, the interpreter
    and paths fixed so that the text is the same on every machine (golden files)."""
    from orchestrator import modes
    from orchestrator import site as sitemod
    from orchestrator.plan.resolved import ResolvedRun
    from orchestrator.plan.sweep import SweepSpec, expand
    from orchestrator.render import render_run

    site = sitemod.load(site_name)[0]
    run = expand(SweepSpec(nodes=(nodes,), modes=(mode,), partitions=(partition,),
                           **model_of(mode, spec)), site)[0]
    run = fixed_script(run)
    part = site.partition(partition)
    env = site.environment(run.framework)
    # A fixed interpreter path keeps the golden files machine-independent.
    env = env.model_copy(update={"python": env.python or "/opt/orch/venv/bin/python"})
    return run, render_run(ResolvedRun(run, site, part, env, modes.get(run.mode)),
                           Path("/scratch/runs") / run.run_id,
                           Path("/scratch/runs/.orch/lib-0123456789ab"))


TRAINER_FILE = ROOT / "tests" / "fixtures" / "trainer" / "tiny.yaml"


def model_of(mode: str, spec: dict) -> dict:
    """``spec`` with a model the mode runs: a trainer file for a mode that runs a user's own
    script (``Mode.phases`` False), the sweep's default zoo model otherwise."""
    from orchestrator import modes

    if modes.get(mode).phases or "models" in spec:
        return spec
    return {**spec, "models": (str(TRAINER_FILE),)}


def fixed_script(run):
    """A run of a trainer file with the file's directory as a fixed path (its JSON in the
    rendered scripts is then the same on every machine: golden files)."""
    if run.script is None:
        return run
    return run.model_copy(update={"script": run.script.replace(str(TRAINER_FILE.parent),
                                                               "/scratch/trainer")})


@pytest.fixture(scope="module")
def local():
    """The shipped local site."""
    from orchestrator import site as sitemod

    return sitemod.load("local")[0]


@pytest.fixture(scope="module")
def cluster():
    """The shipped test cluster's site (its config only: no cluster needed)."""
    from orchestrator import site as sitemod

    return sitemod.load("testcluster")[0]


# A framework mode's short sweep: enough measured iterations for a mean, one warm-up before.
ITERS, WARMUP = 4, 1


def sweep(*args: object, out: Path, check: bool = True, timeout: float = 900):
    """``orch sweep ARGS`` of ``ITERS`` measured iterations after ``WARMUP``, into ``out``."""
    return run_orch("sweep", *args, "--iters", ITERS, "--warmup", WARMUP, "--out", out,
                    check=check, timeout=timeout)


def results(out: Path) -> list[dict]:
    """The result records of the sweep in ``out`` (``orch results --format json``)."""
    return json.loads(run_orch("results", out, "--format", "json", check=True).stdout)


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The test cluster's site name, once ``sinfo`` shows its 4 nodes."""
    problem = None
    if shutil.which("sinfo") is None:
        problem = "Slurm is not installed (run scripts/testcluster up as root)"
    else:
        res = subprocess.run(["sinfo", "-h", "-o", "%D %P"], capture_output=True, text=True,
                             timeout=30)
        if res.returncode != 0:
            problem = f"the test cluster is not up: {res.stderr.strip()}"
    if problem:
        if IN_CI:
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    return "testcluster"


def processes_matching(text: str) -> list[str]:
    """Command lines of live processes (other than this one) that mention ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            found.append(f"{proc.name}: {cmd}")
    return found


def wait_until(what, check, timeout: float = 600, proc: subprocess.Popen | None = None,
               every: float = 0.2):
    """Poll ``check`` until it returns something true, and return that. Only for a state the
    run is sure to reach and stay in (a frozen rank, a lock its sweep holds while a rank is
    frozen, a cancelled job gone from the queue): ``timeout`` bounds a busy shared cluster's
    queueing so that a broken run fails instead of hanging, it is no bet on the run's pace.
    ``what``: words for the failure (or a callable returning them); ``proc``: a process whose
    end before the state is a failure."""
    deadline = time.time() + timeout
    while True:
        found = check()
        if found:
            return found
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended before {_words(what)}: "
                                 f"{proc.communicate() if proc.stdout else proc.returncode}")
        if time.time() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {_words(what)}")
        time.sleep(every)


def _words(what) -> str:
    return what() if callable(what) else what


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP: state T in /proc), as a rank frozen by
    ``--inject-failure RANK@ITER:stop`` is once it froze, until it is continued or killed."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "T"
    except (OSError, IndexError):
        return False


def frozen_rank(out: Path, rank: int) -> int | None:
    """The pid of ``rank`` of a sweep's run once it has stopped itself
    (``--inject-failure RANK@ITER:stop``: its records so far written first), else None. The
    sweep in ``out`` has one run; the rank stays stopped until continued or killed."""
    for log in out.glob(f"*/ranks/rank-{rank}.jsonl") if out.exists() else ():
        lines = log.read_text().splitlines()
        pid = json.loads(lines[0]).get("pid") if lines else None
        if pid and is_stopped(pid):
            return pid
    return None


def wait_processes_gone(text: str, timeout: float = 300) -> None:
    """Until no live process mentions ``text`` (a run id): a cancelled or failed job's
    processes end, Slurm's kill or orch's own (its job script's group: SIGTERM, a grace of
    jobscript.KILL_GRACE_S, SIGKILL) whatever the machine's load, and stay gone. What
    outlives the job for good (an orphan nobody kills) fails here; ``timeout`` only bounds the
    wait for that, it is no claim about how fast the kill is."""
    left: list[str] = []

    def gone() -> bool:
        left[:] = processes_matching(text)
        return not left

    wait_until(lambda: f"the processes of {text} to end: {left}", gone, timeout=timeout,
               every=0.5)


def assert_two_windows(records: list[dict], iters: int, warmup: int) -> list[dict]:
    """A logging rank's records: a native window (``warmup + iters`` records, wall
    clock only, no phase) and then a breakdown window (as many, every phase), iteration numbers
    running on across both. Returns the breakdown window's measured records."""
    from orchestrator import protocol

    its = [r for r in records if r["type"] == protocol.ITER]
    windows = [r.get(protocol.WINDOW) for r in its]
    per = warmup + iters
    assert windows == [protocol.WINDOW_NATIVE] * per + [protocol.WINDOW_BREAKDOWN] * per, windows
    assert [r["iter"] for r in its] == list(range(2 * per))
    assert [r["warmup"] for r in its] == ([True] * warmup + [False] * iters) * 2
    assert all(r["t_iter"] > 0 and not set(protocol.PHASES) & set(r) for r in its[:per])
    assert all(set(protocol.PHASES) <= set(r) for r in its[per:])
    return [r for r in its[per:] if not r["warmup"]]


def assert_phases_cover(measured, phases, tol_s: float, tol_rel: float) -> None:
    """The phases of each rank's breakdown iterations add up to their ``t_iter``: never more
    (the gap ``t_iter - sum(phases)`` is >= 0 in every iteration) and, in the least disturbed
    iteration, within ``tol_s + tol_rel * median t_iter`` of it. Untimed work of orch's own
    inside the loop would show in every iteration, the least disturbed too; a preemption
    between two timers on a loaded machine (seen: 6-40 ms in 1 of 4 iterations at load 10 on
    2 cores) only in some, and how often depends on the machine's load, not on the code."""
    gap = measured["t_iter"] - measured[list(phases)].sum(axis=1)
    assert (gap >= 0).all(), "phases cannot exceed the iteration they are part of"
    for key, rows in measured.assign(gap=gap).groupby(["run_id", "rank"]):
        allowed = tol_s + tol_rel * rows["t_iter"].median()
        assert rows["gap"].min() <= allowed, (key, rows["gap"].describe())
