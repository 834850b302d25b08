"""``orch sweep``: expand a matrix of runs, render, submit, wait, print the scaling table.

With ``--study FILE`` the matrix comes from a study file (orchestrator/plan/study.py); a flag given
on the command line replaces the study's value of that dimension, and ``--dry-run`` prints the
plan (one row per run: dimensions, nodes, ranks, roles) before the scripts."""

from __future__ import annotations

import inspect
import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import UserError
from ..spec import settings
from ..spec.settings import OPTIONS_HELP
from ._common import err_console, out_console, print_event, print_fabric_mismatches, print_runs

# The options of the fault policy (_fault_policy): what a hung or failed run costs.
HangTimeout = Annotated[float, typer.Option(
    help="While waiting: a run none of whose ranks logged a new iteration for this many "
    "seconds (or 10x its median iteration time, if longer) is cancelled and recorded as "
    "HUNG, naming the stalled ranks and nodes; 0: never.", min=0)]
StartupTimeout = Annotated[float, typer.Option(
    help="The same before a run's first iteration (imports, rendezvous, container "
    "start), seconds.", min=1)]
MaxRetries = Annotated[int, typer.Option(
    help="Runs that end NODE_FAIL, BOOT_FAIL, PREEMPTED or HUNG are submitted again, at "
    "most this many times, as new attempts (the old one moves to attempts/<n>/) kept off "
    "the nodes that failed (sbatch --exclude). FAILED, OUT_OF_MEMORY, TIMEOUT and "
    "CANCELLED runs are never retried. Default 1, as Slurm requeues a job after a node "
    "failure by default.", min=0, max=10)]


# The sweep settings' options (--nodes, --mode, --batch-size, …) and the mode options' own flags
# (--overlap, …) are added to this signature from their one declaration (spec.settings, by
# _add_setting_options below): ``given`` receives them by name.
def sweep(
    ctx: typer.Context,
    study: Annotated[str | None, typer.Option(help="Study file (studies/NAME.yaml, or a shipped "
                                              "study's name): the sweep's dimensions; flags "
                                              "given here override it.")] = None,
    site: Annotated[str, typer.Option(help="Site name (orch site list) or path to a site YAML.")]
    = "local",
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help=OPTIONS_HELP)]
    = None,
    out: Annotated[Path | None, typer.Option("--out", help="Sweep directory; default "
                                             "runs/<site>. (-o is --option here.)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the rendered scripts of "
                                          "every run; write and submit nothing.")] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the runs (Slurm).")]
    = True,
    retry_failed: Annotated[bool, typer.Option(help="Submit failed/cancelled runs again (their "
                                               "files move to attempts/).")] = False,
    require_fabric: Annotated[bool, typer.Option(
        "--require-fabric", help="A run whose ranks did not use the partition's declared "
        "fabric (verdict 'mismatch') is FAILED.")] = False,
    cancel_on_interrupt: Annotated[bool, typer.Option(
        "--cancel-on-interrupt", help="Ctrl-C, SIGTERM or SIGHUP cancels the sweep's "
        "unfinished Slurm jobs (without it they keep running; a second Ctrl-C cancels them). "
        "A stopped orch always cancels local-site runs.")] = False,
    hang_timeout: HangTimeout = 300.0,
    startup_timeout: StartupTimeout = 900.0,
    max_retries: MaxRetries = 1,
    pack: Annotated[bool, typer.Option(
        "--pack", help="Slurm: run each partition's runs as job steps of one allocation sized "
        "for its largest run (one queue wait per partition).")] = False,
    pack_shared: Annotated[bool, typer.Option(
        "--pack-shared", help="Like --pack, but runs may share a node where its CPUs allow "
        "(one CPU per rank): quicker, but side-by-side runs contend for their node, which "
        "each run's job-times.json names (co_tenants). --pack keeps a node to one run.")]
    = False,
    array: Annotated[bool, typer.Option(
        "--array", help="Slurm: submit runs of the same shape (partition, nodes, tasks, time) "
        "as one job array.")] = False,
    preflight: Annotated[str, typer.Option(
        "--preflight", help="auto: measure α and B of each partition inside a node and across "
        "nodes before the runs (cached 24 h), then run the sweep smallest scale first and "
        "state every larger run's prediction before submitting it; always: measure again; "
        "never: no pre-flight, no predictions.")] = "auto",
    no_preflight: Annotated[bool, typer.Option(
        "--no-preflight", help="Same as --preflight never: the sweep states no predictions.")]
    = False,
    **given: Any,
) -> None:
    """Expand a matrix of runs, render their scripts, submit them, and print the scaling table."""
    from .. import execute

    runs, site_obj, loaded = plan(ctx, spec_values(given, option), study, site, dry_run=dry_run)
    out_dir = check_out(out or Path("runs") / site_obj.name)
    choice = {"pack": pack, "pack_shared": pack_shared, "array": array}
    strategy = execute.choose(**choice)
    strategy.refuse(site_obj)
    if dry_run:
        return _print_dry_run(runs, site_obj, out_dir, strategy, loaded)
    prepared = _prepare(strategy, runs, site_obj, out_dir, loaded, retry_failed=retry_failed)
    on_event = _logged_events(out_dir)
    try:
        strategy, networks = _predictions(strategy, choice, runs, site_obj, out_dir,
                                          "never" if no_preflight else preflight, wait,
                                          on_event)
        policy = _fault_policy(hang_timeout, startup_timeout, max_retries)
        _carry_out(strategy, prepared, site_obj, out_dir, wait=wait,
                   require_fabric=require_fabric, policy=policy, on_event=on_event)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM, SIGHUP: cli/stop.py
        from .stop import stopped

        stopped(exc, command="sweep", cancel=cancel_on_interrupt, log=out_dir)
    _summary(runs, site_obj, out_dir, wait, networks)


def _prepare(strategy, runs, site_obj, out_dir: Path, loaded, *, retry_failed: bool):
    """Check the runs against the strategy and the site's environments, write their
    directories and scripts (:func:`execute.prepare`), and log the sweep's start: the
    prepared runs."""
    from .. import execute
    from ..runs import rundir
    from ..site import envs

    strategy.check(runs, site_obj, out_dir)
    envs.check_runs(site_obj, runs)
    prepared = execute.prepare(runs, site_obj, out_dir, retry_failed=retry_failed,
                               study=loaded.provenance() if loaded is not None else None,
                               packed=strategy.packed)
    rundir.log_line(out_dir, f"orch sweep started: pid {os.getpid()} on "
                    f"{socket.gethostname()}: orch {shlex.join(sys.argv[1:])}")
    return prepared


def _logged_events(out_dir: Path):
    """Each run's state change: printed, and a line of the sweep's log."""
    from ..runs import rundir

    def on_event(run, record) -> None:
        print_event(run, record)
        reason = f": {record.reason.splitlines()[0]}" if record.reason else ""
        rundir.log_line(out_dir, f"{run.run_id} job {record.job_id or '-'} "
                        f"{record.state}{reason}")

    return on_event


def _carry_out(strategy, prepared, site_obj, out_dir: Path, *, wait: bool,
               require_fabric: bool, policy, on_event) -> None:
    """Submit and (with ``wait``) follow the runs with a progress bar."""
    from .. import backends, execute

    progress = _progress(prepared, out_dir)
    # On a scheduler's queue, the summary's imports while the jobs run (_importing_summary);
    # on the local site the run has the machine to itself (they come after it).
    on_progress = progress.update
    if not backends.scheduler(site_obj.scheduler).sequential:
        on_progress = _importing_summary(progress.update)
    try:
        execute.run(strategy, prepared, site_obj, wait=wait, on_event=on_event,
                    require_fabric=require_fabric, on_progress=on_progress if wait else None,
                    policy=policy)
    finally:
        progress.close()


def _importing_summary(update):
    """``update``, each call after importing the summary's modules (the result set's merge:
    pandas, pyarrow): the first call comes once the jobs are submitted, while they run, and
    the later ones find them imported. Imported before submitting, they would hold every job
    back by their import time (a second, more on a loaded machine); imported after the last
    job ends, they would keep its result waiting as long."""
    def on_progress(states):
        from .. import results  # noqa: F401
        from ..report import scorecard  # noqa: F401

        update(states)

    return on_progress


def _say(line: str) -> None:
    err_console.print(line, highlight=False, markup=False)


def _print_dry_run(runs, site_obj, out_dir: Path, strategy, loaded) -> None:
    """--dry-run: the plan (for a study) and every rendered script; nothing written."""
    from .. import execute

    rendered_runs = execute.dry_run(runs, site_obj, out_dir, packed=strategy.packed)
    if loaded is not None:
        print_plan(runs, f"plan: study {loaded.study.name} ({loaded.path}, sha256 "
                   f"{loaded.sha256[:12]}) on site {site_obj.name}: {len(runs)} run(s)")
    for run, rendered in rendered_runs:
        rdir = out_dir / run.run_id
        sys.stdout.write(f"# ===== {rdir}/job.sbatch\n{rendered.job_script}\n")
        sys.stdout.write(f"# ===== {rdir}/launch.sh\n{rendered.launch_script}\n")
        for name, text in rendered.files:  # e.g. the container wrapper
            sys.stdout.write(f"# ===== {rdir}/{name}\n{text}\n")
    for path, text in strategy.dry_run(runs, site_obj, out_dir):  # packs, arrays
        sys.stdout.write(f"# ===== {path}\n{text}\n")
    err_console.print(f"dry run: {len(runs)} run(s) rendered, nothing written or submitted")


def _progress(prepared, out_dir: Path):
    """Say what is to do, and the progress bar of the runs to wait for."""
    from ..runs.progress import SweepProgress

    skipped = [p for p in prepared if p.action == "skip"]
    err_console.print(f"sweep {out_dir}: {len(prepared)} run(s); {len(skipped)} already finished, "
                      f"{sum(p.action == 'submit' for p in prepared)} to submit")
    return SweepProgress(total=len(prepared), done_before=len(skipped),
                         failed_before=sum(p.record.state != "COMPLETED" for p in skipped))


def _fault_policy(hang_timeout: float, startup_timeout: float, max_retries: int):
    from ..runs import faults, watch

    return faults.FaultPolicy(watch.HangPolicy(hang_timeout, startup_timeout), max_retries)


def _predictions(strategy, choice: dict[str, bool], runs, site_obj, out_dir: Path, how: str,
                 wait: bool, on_event):
    """The pre-flight and, with its networks, the strategy the sweep's ``choice`` chose,
    staged by scale with the predictions stated between scales; (strategy, networks: {}
    without predictions)."""
    from .. import execute
    from ..execute import staged

    packing = strategy.name if strategy.all_at_once else None
    if packing and how == "auto":
        # A pack pays the queue once for every scale; predictions need the smaller scales
        # finished before the larger are submitted. The user picks: --preflight always stages.
        _say(f"no predictions: --{packing} submits every scale at once; --preflight always "
             f"states them, with one {packing} per scale, smallest first")
        return strategy, {}
    networks = staged.sweep_preflight(runs, site_obj, out_dir, how, wait=wait, say=_say,
                                      on_event=on_event)
    if not networks:
        return strategy, networks
    if packing:
        _say(f"--{packing} with predictions: one {packing} per scale, smallest first (each "
             f"scale's predictions are stated before it is submitted)")
    between = staged.stating_predictions(networks, out_dir, _say)
    return execute.choose(**choice, between=between), networks


def _summary(runs, site_obj, out_dir: Path, wait: bool, networks: dict) -> None:
    """The runs' table once they ended (or how to follow them); exit 1 if one failed."""
    from .. import backends, results
    from ..report import scorecard
    from ..runs import rundir

    if not wait and not backends.scheduler(site_obj.scheduler).sequential:
        err_console.print(f"submitted; follow with: orch status {out_dir}")
        rundir.log_line(out_dir, "orch sweep ended: its runs are submitted (--no-wait)")
        return
    keys = results.recheck(out_dir)  # the run records first: merge only reads
    runs_df = results.merge(out_dir, keys)
    ids = {r.run_id for r in runs}
    shown = runs_df[runs_df["run_id"].isin(ids)] if not runs_df.empty else runs_df
    print_runs(results.records(shown))
    print_fabric_mismatches(results.records(shown))
    for line in scorecard.scorecard_lines(out_dir, runs_df) if networks else []:
        _say(line)
    states = [rec["state"] for rec in results.records(shown)]
    rundir.log_line(out_dir, f"orch sweep ended: {len(states)} run(s): " + ", ".join(
        f"{states.count(s)} {s}" for s in sorted(set(states))))
    if any(state != "COMPLETED" for state in states):
        raise typer.Exit(1)


def plan(ctx: typer.Context, values: dict[str, Any], study: str | None, site: str, *,
         dry_run: bool = False):
    """The sweep's runs, its site and its study (None without --study): every input error is
    raised here, before anything is written (with ``dry_run``, all but a data set not made
    yet: a dry run reads no data)."""
    from .. import site as sitemod
    from ..plan import sweep as sweepmod

    if study is None:
        from ..spec.schema import SweepSpec

        site_obj, _path = sitemod.load(site)
        return sweepmod.expand(SweepSpec(**values), site_obj, dry_run=dry_run), site_obj, None
    from ..plan import study as studymod

    loaded = studymod.load(study)
    named = _given(ctx)
    site_obj, _path = sitemod.load(site if "site" in named or not loaded.study.site
                                   else loaded.study.site)
    return (studymod.expand(loaded, site_obj, _overrides(values, named), dry_run=dry_run),
            site_obj, loaded)


def spec_values(given: dict[str, Any], option: list[str] | None) -> dict[str, Any]:
    """The SweepSpec fields from the settings' options as received (text for dimensions)."""
    values = {s.name: s.from_cli(given[s.param]) for s in settings.SETTINGS}
    aliases = {name: given[name] for name in settings.OPTION_FLAGS}
    values["options"] = settings.parse_options(settings.option_items(option, aliases))
    return values


def _overrides(values: dict[str, Any], named: set[str]) -> dict[str, Any]:
    """The SweepSpec fields given on the command line: they replace a study's."""
    out = {s.name: values[s.name] for s in settings.SETTINGS if s.param in named}
    if named & {"option", *settings.OPTION_FLAGS}:
        out["options"] = values["options"]
    return out


def _add_setting_options(func):
    """Add every sweep setting's option, and each mode option's own flag, to ``func``'s
    signature (typer reads the signature), before its ``--option``."""
    sig = inspect.signature(func, eval_str=True)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    where = [p.name for p in params].index("option")
    extra = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default,
                               annotation=Annotated[kind, typer.Option(help=text)])
             for name, kind, default, text in settings.cli_parameters()]
    extra += [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                annotation=Annotated[str | None, typer.Option(help=text)])
              for name, text in settings.OPTION_FLAGS.items()]
    func.__signature__ = sig.replace(parameters=[*params[:where], *extra, *params[where:]])
    return func


sweep = _add_setting_options(sweep)


def _given(ctx: typer.Context) -> set[str]:
    """The parameters given on the command line (or the environment), not defaulted."""
    return {name for name in ctx.params
            if getattr(ctx.get_parameter_source(name), "name", None) in ("COMMANDLINE",
                                                                         "ENVIRONMENT")}


# The plan's columns shown on every row (sweep.plan_row); the others only where they vary.
PLAN_SIZES = ("run_id", "nodes", "tasks_per_node", "ranks", "tasks", "roles")


def print_plan(runs, title: str) -> None:
    """The plan of a sweep, one row per run: what it varies, its size and its tasks' roles."""
    from rich.table import Table

    from ..plan import sweep as sweepmod

    rows = [sweepmod.plan_row(r) for r in runs]
    varying = [k for k in rows[0] if k not in PLAN_SIZES and len({str(r[k]) for r in rows}) > 1
               ] if rows else []
    table = Table(title=title, title_justify="left", box=None, header_style="bold")
    heads = {"batch_size": "batch", "tasks_per_node": "tasks/node"}
    for k in ("run_id", *varying, *PLAN_SIZES[1:]):
        table.add_column(heads.get(k, k.replace("_id", "")),
                         justify="right" if k in ("nodes", "tasks_per_node", "ranks",
                                                  "tasks") else "left")
    for r in rows:
        table.add_row(*(str(r[k]) for k in ("run_id", *varying, *PLAN_SIZES[1:])))
    out_console.print(table, highlight=False)
    out_console.print()


# Kernel file systems where a sweep directory can never live.
_NOT_HERE = (Path("/proc"), Path("/sys"), Path("/dev"))


def check_out(out: Path) -> Path:
    """The sweep directory, resolved: a directory or a path one can be made at."""
    resolved = out.expanduser().resolve()
    if any(resolved == p or p in resolved.parents for p in _NOT_HERE):
        raise UserError(f"--out {out}: {resolved} is on a kernel file system "
                        f"({', '.join(map(str, _NOT_HERE))}); choose a directory on a disk")
    if resolved.exists() and not resolved.is_dir():
        raise UserError(f"--out {out}: is a file, not a directory; choose another --out")
    for parent in resolved.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UserError(f"--out {out}: {parent} is a file, not a directory")
            break
    if len(resolved.name.encode()) > 255:
        raise UserError(f"--out {out}: a file name is at most 255 bytes")
    return resolved
