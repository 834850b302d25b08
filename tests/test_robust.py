"""Robustness: no value runs as shell, no traceback on any input, one execution per attempt.

The injection test renders every payload through every site-config field and CLI value that
reaches a script and *runs* the rendered job script (ranks are /bin/true), then checks that no
marker file appeared. The fuzz test drives ``orch`` in-process (an uncaught exception fails the
test: that is a traceback) over generated bad inputs and checks the exit code.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from tests.conftest import ROOT, frozen_rank, run_orch, wait_until

LOCAL = yaml.safe_load((ROOT / "site-configs" / "local.yaml").read_text())


def orch(*args: object) -> tuple[int, str, str]:
    """``orch ARGS`` in this process: (exit code, stdout, stderr). Any exception other than
    SystemExit propagates: a traceback fails the test."""
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
    data = json.loads(json.dumps(LOCAL))
    data["name"] = name
    data["environments"] = {"torch": {"python": "/bin/true", "env": {"OMP_NUM_THREADS": "1"}}}
    edit(data)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


# --- 1. injection ---------------------------------------------------------------------------

def payloads(mark: Path) -> list[str]:
    return [f"$(touch {mark})", f"`touch {mark}`", f";touch {mark}", f"x\ntouch {mark}",
            f"x'\";touch {mark};#", f"x\rtouch {mark}", f"x\x00touch {mark}"]


def _part(key, value):
    def edit(d):
        d["partitions"][0][key] = value
    return edit


def _sbatch(key, value):
    def edit(d):
        d["partitions"][0].setdefault("sbatch", {})[key] = value
    return edit


def _envtorch(key, value):
    def edit(d):
        d["environments"]["torch"][key] = value
    return edit


def _container(key, value):
    def edit(d):
        c = {"image": "/nonexistent/img.sif", "runtime": "apptainer"}
        c[key] = value
        d["environments"]["torch"]["container"] = c
    return edit


def _partname(value):
    def edit(d):
        d["partitions"][0]["name"] = value
        d["default_partition"] = value
    return edit


SITE_FIELDS = {
    "socket_ifname": lambda p: _part("socket_ifname", p),
    "sbatch.account": lambda p: _sbatch("account", p),
    "sbatch.qos": lambda p: _sbatch("qos", p),
    "sbatch.constraint": lambda p: _sbatch("constraint", p),
    "sbatch.reservation": lambda p: _sbatch("reservation", p),
    "sbatch.extra value": lambda p: _sbatch("extra", [f"--comment={p}"]),
    "sbatch.extra name": lambda p: _sbatch("extra", [f"--{p}"]),
    "partition.env value": lambda p: _part("env", {"X_VAL": p}),
    "partition.env key": lambda p: _part("env", {p: "1"}),
    "partition name": _partname,
    "environment.env value": lambda p: _envtorch("env", {"Y_VAL": p}),
    "environment.env key": lambda p: _envtorch("env", {p: "1"}),
    "environment.modules": lambda p: _envtorch("modules", [p]),
    "container.image": lambda p: _container("image", p),
    "container.python": lambda p: _container("python", p),
    "container.binds": lambda p: _container("binds", [p]),
}


def run_rendered(stdout: str, tmp: Path) -> None:
    """Write the scripts a dry run printed where it says, and execute job.sbatch (and a
    container wrapper) for real."""
    parts = re.split(r"^# ===== (.+)\n", stdout, flags=re.M)
    written: dict[str, Path] = {}
    for name, text in zip(parts[1::2], parts[2::2], strict=True):
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written[path.name] = path
    job = written["job.sbatch"]
    env = {**os.environ, "SLURM_JOB_ID": "1"}
    subprocess.run(["bash", str(job)], cwd=job.parent, capture_output=True, timeout=60,
                   env=env)
    if "container-python" in written:
        subprocess.run(["bash", str(written["container-python"]), "-c", "pass"],
                       cwd=job.parent, capture_output=True, timeout=60, env=env)


def _assert_refused_or_inert(code: int, stdout: str, stderr: str, tmp: Path, mark: Path,
                             what: str) -> None:
    if code == 2:
        assert stderr.startswith("orch: error:"), (what, stderr)
    else:
        assert code == 0, (what, code, stderr)
        run_rendered(stdout, tmp)
    assert not mark.exists(), f"{what}: payload executed"


@pytest.mark.parametrize("field", sorted(SITE_FIELDS))
def test_site_field_payloads_never_execute(tmp_path, field):
    mark = tmp_path / "MARK"
    for i, payload in enumerate(payloads(mark)):
        case = tmp_path / f"c{i}"
        case.mkdir()
        site = site_file(case, SITE_FIELDS[field](payload))
        code, out, err = orch("sweep", "--site", site, "--nodes", "1", "--iters", "1",
                              "--warmup", "0", "--dry-run", "--out", case / "out")
        _assert_refused_or_inert(code, out, err, case, mark, f"{field} {payload!r}")
        if code == 2 and "\n" in payload:
            assert re.search(rf"{re.escape(str(site))}:\d+", err), err  # located


CLI_VALUES = {
    "--out": lambda case, p: ["--out", case / f"o{p}"],
    "--partition": lambda case, p: ["--partition", p, "--out", case / "out"],
    "--mode": lambda case, p: ["--mode", p, "--out", case / "out"],
    "--model": lambda case, p: ["--model", p, "--out", case / "out"],
    "--option": lambda case, p: ["--option", f"backend={p}", "--out", case / "out"],
    "--data": lambda case, p: ["--data", case / p, "--out", case / "out"],
    "--inject-failure": lambda case, p: ["--inject-failure", p, "--out", case / "out"],
    "--launcher": lambda case, p: ["--launcher", p, "--out", case / "out"],
}


@pytest.mark.parametrize("flag", sorted(CLI_VALUES))
def test_cli_value_payloads_never_execute(tmp_path, flag):
    mark = tmp_path / "MARK"
    site = site_file(tmp_path, lambda d: None)
    for i, payload in enumerate(payloads(mark)):
        case = tmp_path / f"c{i}"
        case.mkdir()
        code, out, err = orch("sweep", "--site", site, "--nodes", "1", "--iters", "1",
                              "--warmup", "0", "--dry-run", *CLI_VALUES[flag](case, payload))
        _assert_refused_or_inert(code, out, err, case, mark, f"{flag} {payload!r}")


def test_injection_harness_runs_the_rendered_job(tmp_path):
    """The harness really executes the job script: a payload in a quoted value is inert, but a
    run directory it made proves the script ran."""
    code, out, _ = orch("sweep", "--site", site_file(tmp_path, lambda d: None), "--nodes", "1",
                        "--dry-run", "--out", tmp_path / "out")
    assert code == 0
    run_rendered(out, tmp_path)
    assert list((tmp_path / "out").glob("*/ranks")), "job.sbatch did not run"


# --- 2. fuzz: no traceback, the right exit code ----------------------------------------------

def _raw(text: bytes):
    return ("raw", text)


SITE_CASES: list[tuple[str, object]] = [
    ("deep nesting", _raw(b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n")),
    ("not utf-8", _raw(b"name: x\n\xff\xfe\n")),
    ("utf-16", _raw("name: x\n".encode("utf-16"))),
    ("empty file", _raw(b"")),
    ("a list", _raw(b"- a\n- b\n")),
    ("a scalar", _raw(b"42\n")),
    ("bad yaml", _raw(b"name: [\n")),
    ("duplicate key", _raw((ROOT / "site-configs" / "local.yaml").read_bytes()
                           + b"scheduler: local\n")),
    ("tab indent", _raw(b"name: x\n\tscheduler: local\n")),
    ("nul byte", _raw(b"name: x\x00\n")),
]
for _key, _values in {
    "nodes": [True, False, 0, -1, 10**7, "4", 1.5, None, [], {}],
    "cpus_per_node": [True, 0, 10**6, "two", None],
    "gpus_per_node": [True, -1, 1000, "x"],
    "socket_ifname": ["", "a" * 16, "eth/0", "eth 0", "eth:0", " ", None, 5],
    "name": ["", "p" * 300, "-x", "a b", "a/b", None],
    "interconnect": ["", "myrinet", None],
    "launcher": ["", "nope", 3],
    "memory_per_node_gb": [0, -1, "lots"],
    "ib_hca": ["mlx5_0", [["x"]]],
}.items():
    for _v in _values:
        SITE_CASES.append((f"partition {_key}={_v!r}"[:80], _part(_key, _v)))
for _v in ["0", "00:00:00", "00:99:99", "1:60", "abc", "", "-5", 0, True, "0-00:00:00"]:
    SITE_CASES.append((f"sbatch.time={_v!r}", _sbatch("time", _v)))
for _v in ["", " ", None, 5]:
    SITE_CASES.append((f"container.image={_v!r}", _container("image", _v)))
for _v in ["", "py thon", None]:
    SITE_CASES.append((f"container.python={_v!r}", _container("python", _v)))
SITE_CASES += [
    ("container.binds ['']", _container("binds", [""])),
    ("container.runtime docker", _container("runtime", "docker")),
    ("env key newline", _envtorch("env", {"A\n": "1"})),
    ("env key digit", _envtorch("env", {"1A": "1"})),
    ("env value int", _envtorch("env", {"A": 1})),
    ("modules str", _envtorch("modules", "gcc")),
    ("sbatch.extra not long", _sbatch("extra", ["-p x"])),
    ("sbatch.extra bare", _sbatch("extra", ["--"])),
    ("no partitions", lambda d: d.update(partitions=[])),
    ("partitions not list", lambda d: d.update(partitions="local")),
    ("default partition unknown", lambda d: d.update(default_partition="nope")),
    ("unknown field", lambda d: d.update(colour="blue")),
    ("scheduler pbs", lambda d: d.update(scheduler="pbs")),
    ("environments list", lambda d: d.update(environments=["torch"])),
]


@pytest.mark.parametrize("name,case", SITE_CASES, ids=[c[0] for c in SITE_CASES])
def test_fuzz_site_config(tmp_path, name, case):
    if isinstance(case, tuple):
        path = tmp_path / "fz.yaml"
        path.write_bytes(case[1])
    else:
        path = site_file(tmp_path, case)
    code, _, err = orch("site", "validate", path)
    assert code == 2, (name, err)
    assert err.startswith(f"orch: error: {path}") or str(path) in err, err


SWEEP_CASES: list[tuple[str, ...]] = [
    ("--nodes", ""), ("--nodes", "0"), ("--nodes", "-1"), ("--nodes", "a"), ("--nodes", ","),
    ("--nodes", "99999"), ("--nodes", "1.5"), ("--nodes", "²"),
    ("--tasks-per-node", "0"), ("--tasks-per-node", "-1"), ("--tasks-per-node", "1000000"),
    ("--tasks-per-node", "x"),
    ("--mode", ""), ("--mode", ","), ("--mode", "nope"), ("--model", ""), ("--model", "nope"),
    ("--batch-size", "0"), ("--batch-size", "x"), ("--batch-size", ""),
    ("--batch-size", "99999999"),
    ("--iters", "0"), ("--iters", "-1"), ("--iters", "10000000000"), ("--warmup", "-1"),
    ("--repeats", "0"), ("--dataset", "nope"), ("--dataset", ""),
    ("--time-limit", "0"), ("--time-limit", "-3"),
    ("--inject-failure", "x"), ("--inject-failure", "1@"), ("--launcher", "nope"),
    ("--launcher", "srun"), ("--partition", "nope"), ("--partition", "p" * 300),
    ("--partition", ","), ("--prefetch", "maybe"),
    ("--option", "x"), ("--option", "="), ("--option", "backend="), ("--option", "=gloo"),
    ("--option", "backend=nccl"), ("--option", "backend=mpi2"), ("--option", "nope=1"),
    ("--overlap", "sideways"), ("--bucket-size", "²"), ("--kvstore", "x"),
    ("--site", "nope"), ("--site", "/nonexistent.yaml"), ("--site", ""),
    ("-o", "somedir"),
]
MODE_OPTION_CASES: list[tuple[str, ...]] = [
    ("--mode", "mpi-ssgd", "--option", "bucket_size=²"),
    ("--mode", "mpi-ssgd", "--option", "bucket_size=-1"),
    ("--mode", "mpi-ssgd", "--option", "bucket_size=abc"),
    ("--mode", "mpi-ssgd", "--option", "overlap=bogus"),
    ("--mode", "mxnet-kvstore", "--option", "kvstore=bogus"),
    ("--mode", "mxnet-kvstore", "--option", "servers_per_node=0"),
    ("--mode", "mxnet-kvstore", "--option", "servers_per_node=x"),
    ("--mode", "torch-fsdp", "--option", "reshard_after_forward=maybe"),
    ("--mode", "allreduce-bench", "--option", "sizes=a:b"),
    ("--mode", "allreduce-bench", "--option", "reps=0"),
    ("--mode", "torch-ddp", "--option", "backend=nccl"),
    ("--mode", "torch-ddp,mpi-ssgd", "--option", "backend=bogus"),
    ("--mode", "tf-allreduce", "--option", "implementation=bogus"),
    ("--mode", "chainermn", "--option", "communicator=bogus"),
    ("--mode", "cntk", "--option", "learner=bogus"),
]


@pytest.mark.parametrize("args", SWEEP_CASES + MODE_OPTION_CASES,
                         ids=[" ".join(a)[:60] for a in SWEEP_CASES + MODE_OPTION_CASES])
def test_fuzz_sweep_arguments(tmp_path, args):
    code, _, err = orch("sweep", "--nodes", "1", "--dry-run", "--out", tmp_path / "o", *args)
    assert code == 2, (args, err)
    assert err.startswith("orch: error:") or "Error" in err, err  # click usage errors: exit 2
    assert len(err.strip().splitlines()) <= 8, err


OUT_CASES = ["file", "under-file", "/proc/orchx", "/sys/orchx", "/dev/orchx"]


@pytest.mark.parametrize("where", OUT_CASES)
def test_fuzz_out_path(tmp_path, where):
    (tmp_path / "file").write_text("x")
    out = {"file": tmp_path / "file", "under-file": tmp_path / "file" / "x"}.get(where, where)
    code, _, err = orch("sweep", "--nodes", "1", "--iters", "1", "--out", out)
    assert code == 2 and err.startswith("orch: error: --out"), err
    assert len(err.strip().splitlines()) == 1


MANIFESTS = {
    "not utf-8": b"\xff\xfe{", "empty": b"", "a list": b"[]", "empty object": b"{}",
    "wrong types": b'{"dataset": 1, "samples": "x", "seed": 0, "formats": "npy"}',
    "zero samples": b'{"dataset": "cifar", "samples": 0, "seed": 0, "formats": []}',
    "other dataset": b'{"dataset": "imagenet", "samples": 4, "seed": 0, "formats": ["npy"]}',
    "unknown field": b'{"dataset": "cifar", "samples": 4, "seed": 0, "formats": [], "x": 1}',
    "deep": b"[" * 100000 + b"]" * 100000,
    "missing": None,
}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_fuzz_data_manifest(tmp_path, name):
    d = tmp_path / "data"
    d.mkdir()
    if MANIFESTS[name] is not None:
        (d / "manifest.json").write_bytes(MANIFESTS[name])
    code, _, err = orch("sweep", "--nodes", "1", "--dry-run", "--data", d,
                        "--out", tmp_path / "o")
    assert code == 2 and err.startswith("orch: error:"), err


# Damaged sweep directories: one real finished run, copied and damaged per case.

@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("base") / "sweep"
    run_orch("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--out", out,
             check=True)
    return out


def _log(rdir: Path) -> Path:
    return rdir / "ranks" / "rank-0.jsonl"


def _insert(line: bytes):
    def damage(rdir: Path):
        lines = _log(rdir).read_bytes().splitlines(keepends=True)
        _log(rdir).write_bytes(b"".join([lines[0], line + b"\n", *lines[1:]]))
    return damage


def _write(name: str, data: bytes | None):
    def damage(rdir: Path):
        path = rdir / name
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)
    return damage


def _truncate(rdir: Path) -> None:
    data = _log(rdir).read_bytes()
    _log(rdir).write_bytes(data[: len(data) // 2])


def _stray(rdir: Path) -> None:
    shutil.copy(_log(rdir), rdir / "ranks" / "rank-x.jsonl")


def _results_file(rdir: Path) -> None:
    shutil.rmtree(rdir.parent / "results")
    (rdir.parent / "results").write_text("x")


def _results_garbage(rdir: Path) -> None:
    (rdir.parent / "results" / "runs.parquet").write_bytes(b"garbage")


LOG_DAMAGE = {
    "log: a number": _insert(b"42"), "log: a list": _insert(b"[1, 2]"),
    "log: a string": _insert(b'"x"'), "log: null": _insert(b"null"),
    "log: iter without iter": _insert(b'{"type": "iter", "loss": 1.0}'),
    "log: iter as string": _insert(b'{"type": "iter", "iter": "1", "loss": "a"}'),
    "log: iter nan": _insert(b'{"type": "iter", "iter": 1, "t_total": NaN}'),
    "log: not utf-8": _insert(b"\xff\xfe\x00"), "log: unknown type": _insert(b'{"type": 5}'),
    "log: huge number": _insert(b'{"type": "iter", "iter": 1e999}'),
    "log: deep": _insert(b"[" * 50000 + b"]" * 50000),
    "log: truncated": _truncate, "log: emptied": _write("ranks/rank-0.jsonl", b""),
    "log: deleted": _write("ranks/rank-0.jsonl", None), "log: stray rank-x": _stray,
    "job-times garbage": _write("job-times.json", b"{"),
    "job.json deleted": _write("job.json", None),
}
LEDGER_DAMAGE = {
    "job.json garbage": _write("job.json", b"garbage"), "job.json empty": _write("job.json", b""),
    "job.json list": _write("job.json", b"[]"),
    "job.json bad state": _write("job.json", b'{"run_id": "x", "scheduler": "local", '
                                             b'"state": "EXPLODED"}'),
    "run.json garbage": _write("run.json", b"garbage"), "run.json empty": _write("run.json", b""),
    "run.json object": _write("run.json", b"{}"),
    "results is a file": _results_file,
    "provenance garbage": _write("provenance.json", b"\xff"),
}


@pytest.mark.parametrize("command", ["gather", "status", "results"])
@pytest.mark.parametrize("damage", sorted({**LOG_DAMAGE, **LEDGER_DAMAGE}))
def test_fuzz_damaged_sweep(tmp_path, finished_sweep, command, damage):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    if damage in ("log: truncated", "log: emptied", "log: deleted", "log: stray rank-x") \
            or damage.startswith("log:"):
        shutil.rmtree(out / "results")  # merged anew: the damaged log is read
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    {**LOG_DAMAGE, **LEDGER_DAMAGE}[damage](rdir)
    code, _, err = orch(command, out)
    # status reads neither results/ nor provenance.json
    expected = 2 if damage in LEDGER_DAMAGE and not (
        command == "status" and damage in ("results is a file", "provenance garbage")) else 0
    assert code in ((expected,) if expected == 2 else (0, 1)), (damage, command, code, err)
    if code == 2:
        assert err.startswith("orch: error:") and len(err.strip().splitlines()) == 1, err


def test_fuzz_has_at_least_150_cases():
    n = (len(SITE_CASES) + len(SWEEP_CASES) + len(MODE_OPTION_CASES) + len(OUT_CASES)
         + len(MANIFESTS) + 3 * len({**LOG_DAMAGE, **LEDGER_DAMAGE}))
    assert n >= 150, n


# --- 3. one execution per attempt, never mixed -----------------------------------------------

def test_second_sweep_on_same_out_is_refused(tmp_path):
    # The first sweep's rank freezes itself at its first measured iteration (no hang timeout):
    # its sweep surely holds the lock while the second one tries (a 3-iteration run could end
    # before a second orch had started), and goes on to complete once the test continues it.
    out = tmp_path / "sweep"
    args = ("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--inject-failure",
            "0@1:stop", "--hang-timeout", "0", "--out", str(out))
    first = subprocess.Popen([sys.executable, "-m", "orchestrator", *args],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    pid = None
    try:
        lock = out / ".orch" / "lock"
        wait_until("the first sweep to take the lock", lambda: lock.exists()
                   and lock.read_text().startswith("pid"), proc=first)
        pid = wait_until("the first sweep's rank to freeze", lambda: frozen_rank(out, 0),
                         proc=first)
        second = run_orch(*args)
        assert second.returncode == 2, second.stderr
        assert f"another orch sweep (pid {first.pid})" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)  # the rank goes on as if nothing happened
        else:  # the test failed before: no sweep and no stopped rank left behind
            first.kill()
            for log in out.glob("*/ranks/rank-0.jsonl"):
                with contextlib.suppress(ProcessLookupError, PermissionError, TypeError,
                                         IndexError, ValueError):
                    os.kill(json.loads(log.read_text().splitlines()[0]).get("pid"),
                            signal.SIGKILL)
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    logs = list(out.glob("*/ranks/rank-0.jsonl"))
    assert len(logs) == 1 and logs[0].read_text().count('"type":"header"') == 1


def test_deleted_ledger_never_overwrites_measured_files(tmp_path, finished_sweep):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    before = {p.relative_to(rdir): p.read_bytes() for p in rdir.rglob("*")
              if p.is_file() and p.name != "job.json"}
    (rdir / "job.json").unlink()
    run_orch("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--out", out,
             check=True)
    kept = rdir / "attempts" / "1"
    for rel, data in before.items():
        if rel.parts[0] == "run.json":
            continue
        assert (kept / rel).read_bytes() == data, rel  # the first attempt, untouched
    log = _log(rdir).read_text()
    assert log.count('"type":"header"') == 1  # the new attempt's own log, nothing appended
    assert json.loads((rdir / "job.json").read_text())["attempt"] == 2
    rec = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]
    assert rec["attempt"] == 2 and rec["state"] == "COMPLETED"


@pytest.mark.parametrize(("state", "again"), [("NODE_FAIL", True), ("HUNG", True),
                                              ("FAILED", False)])
def test_next_sweep_resubmits_infrastructure_failures_only(tmp_path, finished_sweep, state,
                                                           again):
    """A run a node failure or a hang ended (its retries spent, or its sweep interrupted)
    says nothing about the workload: the next sweep submits it again as a new attempt. A
    failure of the workload waits for --retry-failed."""
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    ledger = json.loads((rdir / "job.json").read_text())
    (rdir / "job.json").write_text(json.dumps({**ledger, "state": state, "reason": "test"}))
    proc = run_orch("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--out", out,
                    check=again)
    after = json.loads((rdir / "job.json").read_text())
    if again:
        assert "0 already finished, 1 to submit" in proc.stderr, proc.stderr
        assert (after["attempt"], after["state"]) == (2, "COMPLETED")
        assert (rdir / "attempts" / "1" / "ranks" / "rank-0.jsonl").is_file()
    else:
        assert "1 already finished, 0 to submit" in proc.stderr, proc.stderr
        assert (after["attempt"], after["state"]) == (1, state)


def test_second_execution_of_an_attempt_is_refused(tmp_path):
    """A requeued job runs the batch script again in the same directory: job_function refuses
    it (job-times.json shows the attempt already ran) and runs nothing."""
    from orchestrator import jobscript

    mark = tmp_path / "ran"
    (tmp_path / "job.sbatch").write_text(f"touch {mark}\n")
    (tmp_path / "job-times.json").write_text("{}")
    with pytest.raises(RuntimeError, match="already holds an execution"):
        jobscript.job_function(str(tmp_path), 30)
    assert not mark.exists()


def test_job_function_waits_without_polling_and_still_times_out(tmp_path):
    """job_function waits for job.sbatch in a blocking wait (no 50 ms polls beside the ranks):
    a script within the limit returns at once with its status, one past it is stopped (its
    whole process group) at the limit, and both leave job-times.json.

    Neither script would end in the test's time by itself: the quick one's limit is a day, the
    slow one's child sleeps a day. So that each call returns at all shows it returned on the
    script's exit, or stopped the script's group at the limit, with no bound on how long it
    took (a loaded machine is slow); an alarm only turns a broken wait into a failure."""
    from orchestrator import jobscript

    day = 86400
    quick, slow = tmp_path / "quick", tmp_path / "slow"
    for d, body in ((quick, "exit 0\n"),
                    (slow, f"sleep {day} & echo $! > {tmp_path}/child\nwait\n")):
        d.mkdir()
        (d / "job.sbatch").write_text(body)
    with _alarm(600, "job_function did not return: it waited for the limit or the child"):
        assert jobscript.job_function(str(quick), day) == 0
        with pytest.raises(jobscript.JobTimeout, match="time limit of 1 s"):
            jobscript.job_function(str(slow), 1)
    child = int((tmp_path / "child").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert (quick / "job-times.json").is_file() and (slow / "job-times.json").is_file()


@contextlib.contextmanager
def _alarm(seconds: int, what: str):
    """Fail (SIGALRM interrupts the main thread's wait) if the block runs past ``seconds``:
    a bound on a wait that a correct program ends, so that a broken one fails, not hangs."""
    def fail(_signum, _frame):
        raise AssertionError(f"{what} (after {seconds} s)")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.slurm
def test_slurm_jobs_are_not_requeued(slurm_cluster, tmp_path):
    out = tmp_path / "nq"
    run_orch("sweep", "--site", slurm_cluster, "--nodes", "1", "--iters", "100000",
             "--warmup", "1", "--out", out, "--no-wait", check=True)
    rdir = next(p for p in out.iterdir() if (p / "run.json").exists())
    job = json.loads((rdir / "job.json").read_text())["job_id"]
    try:
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                               text=True, timeout=30).stdout
        assert "Requeue=0" in shown, shown
    finally:
        run_orch("cancel", out)


# --- 4. Ctrl-C on orch sweep -----------------------------------------------------------------

def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_and_interrupt(slurm_cluster: str, out: Path, *extra: str) -> tuple[int, str, Path]:
    """orch sweep of one run that cannot end by itself; SIGINT to orch alone once the job runs;
    (exit code, stderr, run directory). Its rank freezes itself at iteration 2 (no hang
    timeout), so the job is still running when orch has exited and the test looks, however
    fast the machine runs its iterations; the test's cancel ends it. Its output goes to files,
    not pipes: the test waits for orch to exit, not for every process that may have inherited
    a pipe to close it. orch starts with SIGINT's default action, as in a terminal: a test
    suite started in the background (``make test &``, nohup) has SIGINT ignored, every child
    inherits that, and Python then never raises KeyboardInterrupt."""
    err_file = out.parent / f"{out.name}.stderr"
    with open(err_file, "w") as err_fh:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "--site",
                                 slurm_cluster, "--nodes", "1", "--iters", "100000", "--warmup",
                                 "1", "--inject-failure", "0@2:stop", "--hang-timeout", "0",
                                 "--out", str(out), *extra], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=err_fh, text=True,
                                preexec_fn=_sigint_default)
    try:
        def running():
            rdirs = [p for p in out.glob("*") if (p / "job.json").exists()] if out.exists() else []
            return rdirs[0] if rdirs and '"RUNNING"' in (rdirs[0] / "job.json").read_text() \
                else None

        rdir = wait_until("the job to run", running, timeout=300, proc=proc, every=0.5)
        proc.send_signal(signal.SIGINT)  # to orch only: the job runs on the cluster
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # say where orch is stuck: its threads' stacks
            proc.send_signal(signal.SIGUSR1)
            time.sleep(3)  # only the failure's report waits: for the stacks to be written
            pytest.fail("orch did not exit within 120 s of SIGINT; its stderr and stacks:\n"
                        + err_file.read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err_file.read_text(), rdir


@pytest.mark.slurm
def test_ctrl_c_names_running_jobs_and_leaves_them(slurm_cluster, tmp_path):
    out = tmp_path / "intr"
    try:
        code, err, rdir = _start_and_interrupt(slurm_cluster, out)
        job = json.loads((rdir / "job.json").read_text())["job_id"]
        assert code == 130, err
        assert f"1 job(s) still running: {rdir.name} (job {job})" in err.replace("\n", " ")
        assert f"orch cancel {out}" in err.replace("\n", " ") and "Traceback" not in err
        assert "RUNNING" in run_orch("status", out, check=True).stdout
    finally:
        run_orch("cancel", out)


@pytest.mark.slurm
def test_ctrl_c_with_cancel_on_interrupt_cancels(slurm_cluster, tmp_path):
    out = tmp_path / "intr2"
    try:
        code, err, rdir = _start_and_interrupt(slurm_cluster, out, "--cancel-on-interrupt")
        assert code == 130 and "cancelled 1 job(s)" in err, err
        assert json.loads((rdir / "job.json").read_text())["state"] == "CANCELLED"
    finally:
        run_orch("cancel", out)


def _kill_rank_when_running(out: Path, rank: int, sig: int, nodes: str = "2",
                            site: str = "local") -> dict:
    """A 2-rank run; signal one rank mid-training; the run's result record. The rank freezes
    itself at iteration 3 (no hang timeout) and is signalled once it has: surely mid-training,
    three iterations logged (a run watched for three logged iterations could be past them, or
    done, by the time the signal came)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "--site", site,
                             "--nodes", nodes,
                             "--iters", "100000", "--warmup", "1", "--time-limit", "3",
                             "--inject-failure", f"{rank}@3:stop", "--hang-timeout", "0",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pid = wait_until(f"rank {rank} to freeze", lambda: frozen_rank(out, rank), timeout=300,
                         proc=proc)
        log = next(out.glob(f"*/ranks/rank-{rank}.jsonl")).read_text()
        assert log.count('"type":"iter"') == 3, log  # its records, written before it froze
        os.kill(pid, sig)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        stuck = frozen_rank(out, rank)  # the test failed before it signalled the rank
        if stuck:
            os.kill(stuck, signal.SIGKILL)
    return json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]


def test_sigkilled_rank_is_the_reason_not_rank_0(tmp_path):
    rec = _kill_rank_when_running(tmp_path / "kill", 1, signal.SIGKILL)
    assert rec["state"] == "FAILED"
    first_line = rec["reason"].splitlines()[0]
    assert first_line.startswith("rank 1: "), rec["reason"]
    assert first_line.endswith("[first to fail: killed by SIGKILL]"), rec["reason"]


# --- gather re-verifies ----------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["log: truncated", "log: emptied", "log: deleted"])
def test_gather_reverifies_changed_logs(tmp_path, finished_sweep, damage):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    assert json.loads((rdir / "job.json").read_text())["logs_digest"]
    LOG_DAMAGE[damage](rdir)
    code, _, err = orch("gather", out)
    assert code == 0, err
    rec = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]
    assert rec["state"] == "FAILED", rec
    assert rec["reason"].startswith("rank logs changed after the run was finalized: rank 0"), rec
    # unchanged logs: nothing re-judged
    shutil.rmtree(out)
    shutil.copytree(finished_sweep, out)
    orch("gather", out)
    rec = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]
    assert rec["state"] == "COMPLETED" and not rec["reason"]


@pytest.mark.slurm
def test_sigkilled_rank_is_the_reason_on_slurm(slurm_cluster, tmp_path):
    """srun's first 'task N:' error line names the rank that died first."""
    rec = _kill_rank_when_running(tmp_path / "kill", 1, signal.SIGKILL, site=slurm_cluster)
    assert rec["state"] == "FAILED"
    first_line = rec["reason"].splitlines()[0]
    # after Slurm's own word ("Slurm state FAILED; ")
    assert re.search(r"(^|; )rank 1: .*\[first to fail: Killed\]$", first_line), rec["reason"]
