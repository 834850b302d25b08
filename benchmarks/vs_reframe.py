"""orch against ReFrame 4.10 driving the same job script on the test cluster: the overhead per
job and the wall time of a 64-job sweep, alternated in one run, as ratios orch / ReFrame.

The workload is the tiniest run orch measures and parses: torch-ddp, LeNet-5, one node, one
rank, 0 warm-up + 2 iterations (the run benchmarks.slurm_overhead times). Both tools run it as
the same job script:

* orch: ``orch sweep --site SITE --nodes 1 --iters 2 --warmup 0 [--repeats 64]`` as a user types
  it (a process of its own), into a fresh sweep directory; its parsed result is the merged
  result set and the scaling table it prints.
* ReFrame (``reframe-hpc`` 4.10, installed by this script into its own virtual environment,
  outside the repository) runs a ``RunOnlyRegressionTest`` generated here, one instance per run
  (a parameter), from a Slurm system made of the site's partitions (the ``slurm`` scheduler,
  the ``srun`` launcher, ``max_jobs`` the sweep's size, so that neither tool holds jobs back).
  Each instance is one of orch's rendered runs (rendered by ``execute.prepare`` into a
  directory of ReFrame's side, never submitted by orch): the ``#SBATCH`` resources become the
  test's ``num_tasks``, ``num_tasks_per_node``, ``num_cpus_per_task`` and ``time_limit``; the
  body of ``job.sbatch`` before its launch becomes ``prerun_cmds``, verbatim; its ``srun``
  line becomes ReFrame's srun launcher with the same options and the same
  ``bash "$RUN_DIR/launch.sh"``. So the batch script ReFrame writes is ReFrame's preamble and
  then orch's ``job.sbatch`` body: the same environment, the same job step, the same rank.
  Its parsed result: the sanity function (every rank log ends with an ``ok`` footer) and a
  performance function (samples/s of the native window) read from the rank logs.

What each tool adds is then its own: orch's submitit submission and the Python controller
that runs ``job.sbatch`` inside the job, its polling and its merge; ReFrame's test loading,
its job script, its ``sacct`` polling and its sanity and performance stages.

Measured, per job (single jobs, one after another, ``--jobs`` of each tool, alternated):

    total      the tool's command, start to exit (submission to parsed result)
    job        the rank's own run time, from its log (header started_at -> footer ended_at):
               the same workload on both sides, subtracted
    overhead   total - job
    queue      Slurm's Submit -> Start of the job (sacct, 1 s resolution): the cluster's
               scheduling and other users' jobs, not the tool; shown apart
    own        overhead - queue: the tool's start, render and submission; the batch script's
               start (and orch's in-job controller); srun's step start and the rank's
               interpreter start (the same on both sides); the end's detection, parsing, exit

and the wall time of a ``--sweep-size`` sweep (64 runs; ``--sweeps`` of each tool, alternated),
each tool's CPU time (its process and its children: sbatch, squeue, sacct) beside it. Ratios
are orch / ReFrame per alternated pair: under 1 where orch is faster. Each measurement notes the
1-minute load average and how many jobs of others were in the queue as it started.

Run: ``.venv/bin/python -m benchmarks.vs_reframe [--jobs 5] [--sweeps 2] [--sweep-size 64]``
with the test cluster up. ``--print-config`` writes the ReFrame configuration and test it
would use and exits (no cluster needed).
"""

from __future__ import annotations

import argparse
import json
import os
import pprint
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks import record
from benchmarks.fidelity import median_interval

ROOT = Path(__file__).resolve().parents[1]
REFRAME_SPEC = "reframe-hpc==4.10.*"
REFRAME_VENV = Path("~/.cache/orch/reframe-venv").expanduser()
# The run both tools run: the one benchmarks.slurm_overhead times.
ITERS, WARMUP = 2, 0
# ReFrame's environment that loads nothing (the job script's own exports are the environment).
ENVIRON = "builtin"
RUNS_VAR = "ORCH_REFRAME_RUNS"  # the ReFrame test reads its runs from this file


# --- ReFrame, in a virtual environment of its own ------------------------------------------

def ensure_reframe(venv: Path = REFRAME_VENV) -> Path:
    """``reframe`` of ``REFRAME_SPEC`` in ``venv``, installed there (pip) if it is not yet."""
    exe = venv / "bin" / "reframe"
    if not (exe.is_file() and reframe_version(exe).startswith("4.10.")):
        if not (venv / "bin" / "python").is_file():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        REFRAME_SPEC], check=True)
    version = reframe_version(exe)
    if not version.startswith("4.10."):
        raise SystemExit(f"{exe}: version {version or 'unknown'}, not {REFRAME_SPEC}")
    return exe


def reframe_version(exe: Path) -> str:
    try:
        proc = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                              timeout=120)
    except OSError:
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


# --- The same job script: a rendered job.sbatch as a ReFrame test's parts ------------------

class Twin(NamedTuple):
    """One rendered run as ReFrame's RunOnlyRegressionTest attributes."""

    num_tasks: int
    num_tasks_per_node: int
    num_cpus_per_task: int
    time_limit_s: int
    prerun: list[str]  # job.sbatch's commands before its launch, verbatim
    launcher_options: list[str]  # its srun's options but those ReFrame's launcher adds itself
    executable: str
    executable_opts: list[str]


# srun options ReFrame's srun launcher writes itself from the test's attributes (Slurm >= 22.05).
LAUNCHER_DERIVED = ("--cpus-per-task",)


def logical_lines(script: str) -> list[str]:
    """A shell script's commands: comment and blank lines dropped, ``\\``-continued lines
    joined (with one space, as the shell reads them)."""
    out: list[str] = []
    pending = ""
    for line in script.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].strip() + " "
            continue
        out.append((pending + line.strip()) if pending else line)
        pending = ""
    return out


def sbatch_directives(script: str) -> dict[str, str]:
    """``#SBATCH --key=value`` lines as key -> value (flags: "")."""
    out = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line.removeprefix("#SBATCH --").partition("=")
            out[key.strip()] = value.strip()
    return out


def twin(job_sbatch: str) -> Twin:
    """Split orch's rendered job.sbatch into what a ReFrame test sets: the resources of its
    ``#SBATCH`` lines, the commands before its ``srun`` launch (verbatim), and that launch as
    launcher options, executable and its arguments. A script that ends other than in one srun
    launch cannot be split (ValueError)."""
    commands = logical_lines(job_sbatch)
    if not commands or not commands[-1].startswith("srun "):
        raise ValueError("job.sbatch does not end in an srun launch")
    tokens = shlex.split(commands[-1], posix=False)[1:]  # posix=False: quotes stay as written
    split = next((i for i, t in enumerate(tokens) if not t.startswith("-")), len(tokens))
    if split == len(tokens):
        raise ValueError("job.sbatch's srun line has no command")
    opts = tokens[:split]
    sb = sbatch_directives(job_sbatch)
    per_node = int(sb.get("ntasks-per-node", "1"))
    tasks = int(sb["ntasks"]) if "ntasks" in sb else int(sb.get("nodes", "1")) * per_node
    cpus = int(sb.get("cpus-per-task", "1"))
    for opt in opts:
        key, _, value = opt.partition("=")
        if key == "--cpus-per-task" and int(value) != cpus:
            raise ValueError(f"srun's {opt} differs from the job's --cpus-per-task={cpus}")
    return Twin(num_tasks=tasks, num_tasks_per_node=per_node, num_cpus_per_task=cpus,
                time_limit_s=hms_seconds(sb.get("time", "00:10:00")), prerun=commands[:-1],
                launcher_options=[o for o in opts if o.partition("=")[0] not in LAUNCHER_DERIVED],
                executable=tokens[split], executable_opts=tokens[split + 1:])


def hms_seconds(text: str) -> int:
    """Slurm's [D-]HH:MM:SS (as orch writes --time) in seconds."""
    days, _, hms = text.rpartition("-")
    parts = [int(p) for p in hms.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def srun_line(t: Twin) -> str:
    """The launch ReFrame's srun launcher writes for ``t`` (SrunLauncher.command: srun, then
    --cpus-per-task, then the test's launcher options, executable and arguments)."""
    return " ".join(["srun", f"--cpus-per-task={t.num_cpus_per_task}", *t.launcher_options,
                     t.executable, *t.executable_opts])


# --- The ReFrame configuration and test, generated ------------------------------------------

def reframe_config(site, max_jobs: int) -> dict[str, Any]:
    """ReFrame's site configuration for an orch Slurm site: one system, every partition of the
    site with the slurm scheduler, the srun launcher and ``max_jobs`` jobs at once. The rest is
    ReFrame's own defaults (its builtin environment, its logging)."""
    parts = [{"name": p.name, "descr": f"{p.name} ({p.interconnect}) of orch's site {site.name}",
              "scheduler": "slurm", "launcher": "srun", "access": [f"--partition={p.name}"],
              "environs": [ENVIRON], "max_jobs": max_jobs}
             for p in site.partitions]
    return {"systems": [{"name": site.name, "descr": site.description or site.name,
                         "hostnames": [".*"], "modules_system": "nomod",
                         "partitions": parts}]}


TEST_PY = '''\
"""Generated by benchmarks/vs_reframe.py: one instance per run of orch's in ${RUNS_VAR}."""
import json
import os

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import (parameter, performance_function, run_after, run_before,
                                   sanity_function)

with open(os.environ["RUNS_VAR"]) as fh:
    RUNS = json.load(fh)

FOOTER_OK = r'^\\{"type":"footer".*"status":"ok"'
NATIVE_ITER = r'^\\{"type":"iter".*"window":"native","warmup":false.*"t_iter":([0-9.eE+-]+)'


@rfm.simple_test
class OrchRun(rfm.RunOnlyRegressionTest):
    run_id = parameter(sorted(RUNS))
    valid_prog_environs = ["ENVIRON"]
    sourcesdir = None

    @run_after("init")
    def from_job_sbatch(self):
        run = RUNS[self.run_id]
        self.valid_systems = [run["system"]]
        self.num_tasks = run["num_tasks"]
        self.num_tasks_per_node = run["num_tasks_per_node"]
        self.num_cpus_per_task = run["num_cpus_per_task"]
        self.time_limit = run["time_limit_s"]
        self.prerun_cmds = run["prerun"]
        self.executable = run["executable"]
        self.executable_opts = run["executable_opts"]

    @run_before("run")
    def launch_as_job_sbatch(self):
        self.job.launcher.options = RUNS[self.run_id]["launcher_options"]

    @sanity_function
    def every_rank_ended_ok(self):
        logs = RUNS[self.run_id]["rank_logs"]
        return sn.all(sn.map(lambda log: sn.assert_found(FOOTER_OK, log), logs))

    @performance_function("samples/s")
    def samples_per_s(self):
        run = RUNS[self.run_id]
        slowest = sn.max(sn.map(
            lambda log: sn.sum(sn.extractall(NATIVE_ITER, log, 1, float)), run["rank_logs"]))
        return run["samples_per_iter"] * run["iters"] * len(run["rank_logs"]) / slowest
'''.replace("RUNS_VAR", RUNS_VAR).replace("ENVIRON", ENVIRON)


def manifest(prepared, site_name: str) -> dict[str, dict]:
    """run id -> what the ReFrame test reads of it (its Twin, rank logs, samples)."""
    out = {}
    for p in prepared:
        t = twin((p.rdir / "job.sbatch").read_text())
        out[p.run.run_id] = {
            **t._asdict(), "system": f"{site_name}:{p.run.partition}",
            "rank_logs": [str(p.rdir / "ranks" / f"rank-{k}.jsonl") for k in range(t.num_tasks)],
            "samples_per_iter": p.run.batch_size, "iters": p.run.iters}
    return out


def write_reframe_files(folder: Path, site, max_jobs: int) -> tuple[Path, Path]:
    """config.py and test.py of ReFrame's side into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "config.py"
    config.write_text("# Generated by benchmarks/vs_reframe.py from orch's site "
                      f"{site.name!r}.\nsite_configuration = "
                      f"{pprint.pformat(reframe_config(site, max_jobs), sort_dicts=False)}\n")
    test = folder / "test.py"
    test.write_text(TEST_PY)
    return config, test


# --- Measuring one tool's command ------------------------------------------------------------

def _children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def others_in_queue() -> int:
    """Jobs in Slurm's queue (pending or running): called when none of ours is, so others'."""
    proc = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True,
                          timeout=60)
    return len(proc.stdout.split()) if proc.returncode == 0 else -1


def wait_quiet(max_s: float) -> tuple[float, int]:
    """Wait (up to ``max_s``) for the queue to hold no other jobs, so that a measurement does
    not start behind a long one; (seconds waited, others' jobs as the measurement starts)."""
    t0 = time.time()
    while (others := others_in_queue()) > 0 and time.time() - t0 < max_s:
        time.sleep(5)
    return time.time() - t0, others


def timed(cmd: list[str], log: Path, env: dict[str, str] | None = None,
          cwd: Path = ROOT) -> tuple[float, float, float]:
    """Run a tool's command, its output to ``log``: (start, end, CPU seconds of it and its
    children). A failed command stops the benchmark with its output's tail."""
    cpu0, t0 = _children_cpu(), time.time()
    with open(log, "w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd,
                              env={**os.environ, **(env or {})})
    t1, cpu = time.time(), _children_cpu() - cpu0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{shlex.join(cmd)} exited with {proc.returncode}:\n{tail}")
    return t0, t1, cpu


def rank_times(rdir: Path) -> tuple[float, float]:
    """(first rank's start, last rank's end) from the run's rank logs: header started_at and
    footer ended_at, the workload's own clock."""
    starts, ends = [], []
    for log in sorted((rdir / "ranks").glob("rank-*.jsonl")):
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") == "header":
                starts.append(rec["started_at"])
            elif rec.get("type") == "footer":
                ends.append(rec["ended_at"])
    if not starts or len(ends) != len(starts):
        raise SystemExit(f"{rdir}: rank logs without header or footer")
    return min(starts), max(ends)


def sacct_times(job_ids: list[str]) -> dict[str, tuple[float, float, float]]:
    """job id -> (Submit, Start, End) in epoch seconds, from Slurm's accounting (1 s)."""
    proc = subprocess.run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o",
                           "JobIDRaw,Submit,Start,End"], capture_output=True, text=True,
                          env={**os.environ, "SLURM_TIME_FORMAT": "%s"}, timeout=120)
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            out[parts[0]] = (float(parts[1]), float(parts[2]), float(parts[3]))
    return out


def job_figures(t0: float, t1: float, job: Job, job_id: str) -> dict[str, float]:
    """One single job's breakdown (the module's docstring says what each figure is)."""
    rdir, submitted = job
    r0, r1 = rank_times(rdir)
    for _ in range(30):  # slurmdbd lags slurmctld by a moment
        times = sacct_times([job_id]).get(job_id)
        if times:
            break
        time.sleep(2)
    else:
        raise SystemExit(f"sacct has no times of job {job_id}")
    submit, start, _end = times
    total, job = t1 - t0, r1 - r0
    return {"total": total, "job": job, "overhead": total - job, "queue": start - submit,
            "own": total - job - (start - submit), "to_submit": submitted - t0,
            "to_rank": r0 - start, "after_rank": t1 - r1}


class Job(NamedTuple):
    """A job as its tool recorded it: its run directory, when the tool had it submitted (the
    tool's clock: sbatch returned)."""

    rdir: Path
    submitted: float


class Side(NamedTuple):
    """How to run one tool on the cluster: the site, the partition, ReFrame's files."""

    site: Any  # orchestrator.site.Site
    partition: str
    reframe: Path
    config: Path
    test: Path
    base: Path  # the run's temporary folder


def spec(repeats: int, partition: str):
    from orchestrator.plan.sweep import SweepSpec

    return SweepSpec(nodes=(1,), iters=ITERS, warmup=WARMUP, repeats=repeats,
                     partitions=(partition,))


def orch_command(side: Side, repeats: int, out: Path) -> list[str]:
    """``orch sweep`` as a user types it (this checkout's code, its own process)."""
    return [sys.executable, "-m", "orchestrator", "sweep", "--site", side.site.name,
            "--partition", side.partition, "--nodes", "1", "--iters", str(ITERS), "--warmup",
            str(WARMUP), "--repeats", str(repeats), "--out", str(out)]


def run_orch(side: Side, name: str, repeats: int) -> tuple[float, float, float, dict[str, Job]]:
    """One ``orch sweep``: (start, end, CPU s, job id -> its Job)."""
    from orchestrator.runs import rundir

    out = side.base / name
    t0, t1, cpu = timed(orch_command(side, repeats, out), side.base / f"{name}.log")
    jobs = {}
    for rdir in rundir.run_dirs(out):
        rec = rundir.read_record(rdir)
        if rec is None or rec.state != "COMPLETED" or not rec.job_id:
            raise SystemExit(f"{rdir}: not COMPLETED ({rec.state if rec else 'no record'})")
        jobs[rec.job_id] = Job(rdir, rec.submitted_at or float("nan"))
    if len(jobs) != repeats:
        raise SystemExit(f"{out}: {len(jobs)} completed runs, not {repeats}")
    return t0, t1, cpu, jobs


def prepare_reframe(side: Side, name: str, repeats: int) -> Path:
    """orch's rendered runs for ReFrame's side (written, not submitted) and their manifest."""
    from orchestrator import execute
    from orchestrator.plan.sweep import expand

    runs = execute.prepare(expand(spec(repeats, side.partition), side.site), side.site,
                           side.base / name / "runs")
    path = side.base / name / "runs.json"
    path.write_text(json.dumps(manifest(runs, side.site.name), indent=1) + "\n")
    return path


def keep_log(output: str, folder: Path) -> None:
    """Move ReFrame's log file (its default: a new /tmp/rfm-*.log each run) into ``folder``."""
    import shutil

    for path in re.findall(r"Log file\(s\) saved in '([^']+)'", output):
        if Path(path).is_file():
            shutil.move(path, folder / Path(path).name)


def reframe_command(side: Side, prefix: Path) -> list[str]:
    return [str(side.reframe), "-C", str(side.config), "-c", str(side.test), "-r", "--prefix",
            str(prefix), "--report-file", str(prefix / "report.json"), "--system",
            f"{side.site.name}:{side.partition}", "--exec-policy", "async", "--nocolor"]


def run_reframe(side: Side, name: str, runs: Path) -> tuple[float, float, float, dict[str, Job]]:
    """One ``reframe -r`` over the runs of ``runs`` (prepare_reframe): (start, end, CPU s,
    job id -> its Job)."""
    prefix = side.base / name / "reframe"
    log = side.base / f"{name}.log"
    t0, t1, cpu = timed(reframe_command(side, prefix), log, env={RUNS_VAR: str(runs)})
    keep_log(log.read_text(errors="replace"), prefix)
    wanted = json.loads(runs.read_text())
    report = json.loads((prefix / "report.json").read_text())
    jobs = {}
    for case in (c for r in report["runs"] for c in r["testcases"]):
        if case.get("result") != "pass":
            raise SystemExit(f"ReFrame: {case.get('name')}: {case.get('result')} "
                             f"({case.get('fail_reason')})")
        run_id = case["run_id"]
        jobs[str(case["jobid"])] = Job(Path(wanted[run_id]["rank_logs"][0]).parent.parent,
                                       case["job_submit_time"])
    if len(jobs) != len(wanted):
        raise SystemExit(f"ReFrame ran {len(jobs)} of {len(wanted)} runs")
    return t0, t1, cpu, jobs


# --- Alternated measurements -----------------------------------------------------------------

TOOLS = ("orch", "ReFrame")


def measure(side: Side, tool: str, name: str, repeats: int, quiet_s: float) -> dict[str, Any]:
    """One measurement of ``tool``: ``repeats`` runs in one command, after the queue is quiet;
    a single job's breakdown (repeats 1) or a sweep's wall time, with the machine's state."""
    runs = prepare_reframe(side, name, repeats) if tool == "ReFrame" else None
    waited, others = wait_quiet(quiet_s)
    load = os.getloadavg()[0]
    t0, t1, cpu, jobs = (run_orch(side, name, repeats) if runs is None
                         else run_reframe(side, name, runs))
    row: dict[str, Any] = {"tool": tool, "wall": t1 - t0, "cpu": cpu, "load": load,
                           "others": others, "waited": waited}
    if repeats == 1:
        (job_id, job), = jobs.items()
        row.update(job_figures(t0, t1, job, job_id))
    else:
        times = sacct_times(sorted(jobs))
        submits = [j.submitted for j in jobs.values()]
        row.update({"queue": statistics.mean(s - q for q, s, _ in times.values()),
                    "first_submit": min(submits) - t0, "submit_span": max(submits) - min(submits),
                    "after_last": t1 - max(rank_times(j.rdir)[1] for j in jobs.values())})
    print(f"{name:>14} {tool:<8} " + " ".join(
        f"{k} {v:.2f}" for k, v in row.items() if isinstance(v, float)), flush=True)
    return row


def alternate(side: Side, kind: str, pairs: int, repeats: int, quiet_s: float) -> list[dict]:
    """``pairs`` x (orch, ReFrame), each pair in that order."""
    rows = []
    for k in range(pairs):
        for tool in TOOLS:
            row = measure(side, tool, f"{kind}-{k}-{tool.lower()}", repeats, quiet_s)
            rows.append({**row, "pair": k, "kind": kind})
    return rows


def ratios(rows: list[dict], key: str) -> list[float]:
    """orch / ReFrame of ``key``, per pair."""
    by = {(r["pair"], r["tool"]): r[key] for r in rows}
    pairs = sorted({r["pair"] for r in rows})
    return [by[k, "orch"] / by[k, "ReFrame"] for k in pairs]


def ratio_row(label: str, rs: list[float]) -> list[str]:
    low, high, cover = median_interval(rs)
    return [label, f"{statistics.median(rs):.2f}", f"{min(rs):.2f}-{max(rs):.2f}",
            f"{low:.2f}-{high:.2f} ({cover:.0%})", str(len(rs))]


def mean_of(rows: list[dict], tool: str, key: str) -> float:
    return statistics.mean(r[key] for r in rows if r["tool"] == tool)


# --- Report ----------------------------------------------------------------------------------

JOB_COLUMNS = ("total", "job", "overhead", "queue", "own", "to_submit", "to_rank", "after_rank",
               "cpu")
SWEEP_COLUMNS = ("wall", "queue", "first_submit", "submit_span", "after_last", "cpu")


def tool_table(title: str, rows: list[dict], columns: tuple[str, ...]) -> record.Table:
    return record.Table(title=title, columns=["tool", *columns],
                        rows=[[tool, *(f"{mean_of(rows, tool, c):.2f}" for c in columns)]
                              for tool in TOOLS])


def each_table(rows: list[dict]) -> record.Table:
    cols = ("wall", "overhead", "own", "queue", "cpu", "load", "others")
    return record.Table(title="Each measurement, in the order run (seconds; load: 1-minute "
                        "load average at its start; others: others' jobs in the queue then)",
                        columns=["kind", "pair", "tool", *cols],
                        rows=[[r["kind"], str(r["pair"]), r["tool"],
                               *(f"{r[c]:.2f}" if c in r else "" for c in cols)]
                              for r in rows])


def report(single: list[dict], sweep: list[dict], a: argparse.Namespace) -> None:
    over, own, wall = (ratios(single, "overhead"), ratios(single, "own"),
                       ratios(sweep, "wall"))
    ratio_table = record.Table(
        title="orch / ReFrame, per alternated pair (under 1: orch faster): median, range, and "
              "the median's interval (benchmarks.fidelity.median_interval)",
        columns=["figure", "median", "min-max", "interval (coverage)", "pairs"],
        rows=[ratio_row("overhead per job", over), ratio_row("own overhead per job", own),
              ratio_row(f"{a.sweep_size}-job sweep, wall", wall)])
    tables = [tool_table(f"Per job: mean of {a.jobs} single jobs (seconds)", single,
                         JOB_COLUMNS),
              tool_table(f"{a.sweep_size}-job sweep: mean of {a.sweeps} (seconds)", sweep,
                         SWEEP_COLUMNS),
              ratio_table, each_table(single + sweep)]
    for t in tables:
        print("\n" + "\n".join(_lines(t)))
    loads = [r["load"] for r in single + sweep]
    m = {tool: {k: round(mean_of(single, tool, k), 3) for k in JOB_COLUMNS}
         | {f"sweep_{k}": round(mean_of(sweep, tool, k), 3) for k in SWEEP_COLUMNS}
         for tool in TOOLS}
    summary = (f"overhead per job orch {m['orch']['overhead']:.1f} s, ReFrame "
               f"{m['ReFrame']['overhead']:.1f} s (orch/ReFrame {statistics.median(over):.2f}, "
               f"{min(over):.2f}-{max(over):.2f}); {a.sweep_size}-job sweep orch "
               f"{m['orch']['sweep_wall']:.0f} s, ReFrame {m['ReFrame']['sweep_wall']:.0f} s "
               f"({statistics.median(wall):.2f}, {min(wall):.2f}-{max(wall):.2f}); load "
               f"{min(loads):.1f}-{max(loads):.1f}")
    print("\n" + summary)
    record.write("vs_reframe", summary,
                 {"orch": m["orch"], "reframe": m["ReFrame"],
                  "ratio_overhead": [round(x, 3) for x in over],
                  "ratio_own": [round(x, 3) for x in own],
                  "ratio_sweep_wall": [round(x, 3) for x in wall],
                  "jobs": a.jobs, "sweeps": a.sweeps, "sweep_size": a.sweep_size,
                  "load": [round(min(loads), 2), round(max(loads), 2)],
                  "reframe_version": reframe_version(a.reframe_exe)},
                 tables=tables, notes="\n\n".join([NOTES, *a.note]))


def _lines(t: record.Table) -> list[str]:
    from benchmarks.page import table

    return [t.title, *table(t.columns, t.rows)]


NOTES = """\
Both tools run the same job script: orch's rendered `job.sbatch` of a torch-ddp LeNet-5 run
(1 node, 1 rank, 2 iterations); ReFrame's test takes its resources, its commands before the
launch (verbatim) and its `srun` line (ReFrame's srun launcher, same options). *job* is the
rank's own time from its log, the same workload on both sides; *overhead* is the rest of the
command's wall time; *queue* is Slurm's Submit→Start (sacct, 1 s resolution: a single job's
queue and own are ±1 s), shown apart as the cluster's, and *own* is overhead minus queue.
*to_submit*: the command's start to its job's submission (sbatch returned, as the tool
recorded it); *to_rank*: the job's start (sacct) to the rank's (the batch script, orch's
in-job controller, srun's step, the interpreter); *after_rank*: the rank's end to the tool's
exit with its parsed result. Sweep: *first_submit* and *submit_span* from the tools' own
submission times, *after_last* the last rank's end to the command's exit; *cpu* the tool's
CPU seconds with its children (sbatch, squeue, sacct). Each measurement first waits for a
queue without others' jobs (at most `--quiet-wait`). ReFrame's partitions have `max_jobs` at
the sweep's size, so neither tool holds jobs back; ReFrame polls at its default rates
(10 Hz decaying to 0.1 Hz)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=5, help="single jobs of each tool")
    p.add_argument("--sweeps", type=int, default=2, help="sweeps of each tool")
    p.add_argument("--sweep-size", type=int, default=64)
    p.add_argument("--site", default="testcluster")
    p.add_argument("--partition", default=None, help="default: the site's default")
    p.add_argument("--quiet-wait", type=float, default=300, help="seconds to wait, before "
                   "each measurement, for others' jobs to leave the queue")
    p.add_argument("--reframe-venv", type=Path, default=REFRAME_VENV)
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a paragraph for the result's notes (what changed since the last run); "
                   "repeatable")
    p.add_argument("--keep", action="store_true", help="keep the run's folder (printed)")
    p.add_argument("--print-config", type=Path, default=None, metavar="DIR",
                   help="write ReFrame's config.py and test.py into DIR and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    from orchestrator import site as sitemod

    a = parser().parse_args(argv)
    site = sitemod.load(a.site)[0]
    if a.print_config:
        for path in write_reframe_files(a.print_config, site, a.sweep_size):
            print(path)
        return 0
    a.reframe_exe = ensure_reframe(a.reframe_venv)
    base = Path(tempfile.mkdtemp(prefix="orch-vs-reframe-"))
    config, test = write_reframe_files(base / "reframe", site, a.sweep_size)
    side = Side(site, a.partition or site.default_partition, a.reframe_exe, config, test, base)
    print(f"ReFrame {reframe_version(a.reframe_exe)}; folder {base}", flush=True)
    try:
        single = alternate(side, "job", a.jobs, 1, a.quiet_wait)
        sweep = alternate(side, "sweep", a.sweeps, a.sweep_size, a.quiet_wait)
        report(single, sweep, a)
    finally:
        if not a.keep:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
