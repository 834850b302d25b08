"""The ``orch`` command line: the edge where input is parsed, files are written, and errors
become one clear line with exit code 2 (never a traceback)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from . import __version__, envs, execute, results, rundir
from . import site as sitemod
from . import sweep as sweepmod
from .errors import UserError

app = typer.Typer(
    help="Run distributed deep-learning training benchmarks and explain how they scale.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
site_app = typer.Typer(help="List, show, validate site configs; print their JSON schema.",
                       no_args_is_help=True)
app.add_typer(site_app, name="site")
env_app = typer.Typer(help="Framework environments of a site: list them, build them.",
                      no_args_is_help=True)
app.add_typer(env_app, name="env")

# Not a terminal (a pipe, CI's log): do not wrap long paths and run ids at 80 columns.
out_console = Console(width=None if sys.stdout.isatty() else 200)
err_console = Console(stderr=True, soft_wrap=True)

STATE_STYLE = {"COMPLETED": "green", "FAILED": "red", "CANCELLED": "yellow", "TIMEOUT": "red",
               "RUNNING": "cyan", "PENDING": "blue", "NEW": "dim"}

def _version(value: bool) -> None:
    if value:
        out_console.print(f"orch {__version__}")
        raise typer.Exit()

@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """orch: sweeps of distributed training runs on Slurm clusters or this machine."""

# --- sweep ---------------------------------------------------------------------------------

@app.command()
def sweep(
    site: Annotated[str, typer.Option(help="Site name (site-configs/) or path to a site YAML.")]
    = "local",
    nodes: Annotated[str, typer.Option(help="Node counts, comma-separated.")] = "1,2,4",
    mode: Annotated[str, typer.Option(help="Distributed mode(s), comma-separated.")]
    = "torch-ddp",
    model: Annotated[str, typer.Option(help="Model(s) from the zoo, comma-separated.")]
    = "lenet5",
    dataset: Annotated[str, typer.Option(help="cifar (32x32) or imagenet (224x224).")] = "cifar",
    partition: Annotated[str | None, typer.Option(help="Partition(s), comma-separated; "
                                                  "default: the site's default.")] = None,
    batch_size: Annotated[str, typer.Option(help="Samples per rank, comma-separated.")] = "32",
    tasks_per_node: Annotated[int | None, typer.Option(help="Ranks per node; default: one per "
                                                       "GPU, or 1 on CPU partitions.")] = None,
    iters: Annotated[int, typer.Option(help="Measured iterations.")] = 20,
    warmup: Annotated[int, typer.Option(help="Warm-up iterations (run, not measured).")] = 5,
    repeats: Annotated[int, typer.Option(help="Repetitions of every run.")] = 1,
    launcher: Annotated[str | None, typer.Option(help="srun, mpirun or local; default: the "
                                                 "partition's.")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="Mode option "
                      "NAME=VALUE[,VALUE] (a matrix dimension), e.g. backend=gloo.")] = None,
    overlap: Annotated[str | None, typer.Option(help="Same as --option overlap=...: gradient "
                                                "communication after backward (none) or "
                                                "layer by layer behind it (wfbp).")] = None,
    bucket_size: Annotated[str | None, typer.Option(help="Same as --option bucket_size=...: "
                                                    "bytes merged per gradient send.")] = None,
    kvstore: Annotated[str | None, typer.Option(help="Same as --option kvstore=... "
                                                "(dist_sync, dist_async).")] = None,
    data: Annotated[str | None, typer.Option(help="On-disk data set (orch data make); "
                                             "default: synthetic batches in memory.")] = None,
    prefetch: Annotated[str, typer.Option(help="With --data: yes, no or yes,no (read ahead in "
                                          "a loader process or not).")] = "yes",
    time_limit: Annotated[int | None, typer.Option(help="Hard time limit per run, minutes.")]
    = None,
    out: Annotated[Path | None, typer.Option(help="Sweep directory; default runs/<site>.")]
    = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the rendered scripts of "
                                          "every run; write and submit nothing.")] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the runs (Slurm).")]
    = True,
    retry_failed: Annotated[bool, typer.Option(help="Submit failed/cancelled runs again (their "
                                               "files move to attempts/).")] = False,
    inject_failure: Annotated[str | None, typer.Option(help="Testing aid: RANK@ITER makes that "
                                                       "rank fail at that iteration.")] = None,
    require_fabric: Annotated[bool, typer.Option(
        "--require-fabric", help="A run whose ranks did not use the partition's declared "
        "fabric (verdict 'mismatch') is FAILED.")] = False,
) -> None:
    """Expand a matrix of runs, render their scripts, submit them, and print the scaling table."""
    site_obj, _path = sitemod.load(site)
    spec = sweepmod.SweepSpec(
        nodes=sweepmod.parse_int_list(nodes, "--nodes"),
        modes=sweepmod.parse_name_list(mode),
        models=sweepmod.parse_name_list(model),
        dataset=dataset,
        partitions=sweepmod.parse_name_list(partition) if partition else (None,),
        batch_sizes=sweepmod.parse_int_list(batch_size, "--batch-size"),
        tasks_per_node=tasks_per_node,
        iters=iters,
        warmup=warmup,
        repeats=repeats,
        launcher=launcher,
        time_limit_min=time_limit,
        options=sweepmod.parse_options([*(option or []), *(
            f"{name}={value}" for name, value in (("overlap", overlap),
                                                  ("bucket_size", bucket_size),
                                                  ("kvstore", kvstore)) if value)]),
        inject_failure=inject_failure,
        data=data,
        prefetch=_yes_no_list(prefetch, "--prefetch"),
    )
    runs = sweepmod.expand(spec, site_obj)
    out_dir = (out or Path("runs") / site_obj.name).resolve()
    if not dry_run:
        envs.check(site_obj, {r.framework for r in runs})
    if dry_run:
        for run, rendered in execute.dry_run(runs, site_obj, out_dir):
            rdir = out_dir / run.run_id
            sys.stdout.write(f"# ===== {rdir}/job.sbatch\n{rendered.job_script}\n")
            sys.stdout.write(f"# ===== {rdir}/launch.sh\n{rendered.launch_script}\n")
            for name, text in rendered.files:  # e.g. the container wrapper
                sys.stdout.write(f"# ===== {rdir}/{name}\n{text}\n")
        err_console.print(f"dry run: {len(runs)} run(s) rendered, nothing written or submitted")
        return
    prepared = execute.prepare(runs, site_obj, out_dir, retry_failed=retry_failed)
    skipped = [p for p in prepared if p.action == "skip"]
    err_console.print(f"sweep {out_dir}: {len(runs)} run(s); {len(skipped)} already finished, "
                      f"{sum(p.action == 'submit' for p in prepared)} to submit")
    execute.execute(prepared, site_obj, wait=wait, on_event=_print_event,
                    require_fabric=require_fabric)
    if not wait and site_obj.scheduler == "slurm":
        err_console.print(f"submitted; follow with: orch status {out_dir}")
        return
    runs_df = results.merge(out_dir)
    ids = {r.run_id for r in runs}
    shown = runs_df[runs_df["run_id"].isin(ids)] if not runs_df.empty else runs_df
    _print_runs(results.records(shown))
    _print_fabric_mismatches(results.records(shown))
    if any(rec["state"] != "COMPLETED" for rec in results.records(shown)):
        raise typer.Exit(1)

def _yes_no_list(text: str, what: str) -> tuple[bool, ...]:
    values = sweepmod.parse_name_list(text)
    bad = [v for v in values if v not in ("yes", "no")]
    if bad or not values:
        raise UserError(f"{what} {text}: expected yes, no or yes,no")
    return tuple(v == "yes" for v in values)


def _print_event(run, record) -> None:
    style = STATE_STYLE.get(record.state, "")
    job = f" job {record.job_id}" if record.job_id else ""
    reason = f": {record.reason.splitlines()[0]}" if record.reason else ""
    err_console.print(f"  {run.run_id}{job} [{style}]{record.state}[/]{reason}", highlight=False)

# --- results / gather / status / cancel ----------------------------------------------------

def _sweep_dir(path: Path) -> Path:
    if not path.is_dir():
        raise UserError(f"{path}: no such sweep directory")
    if not rundir.run_dirs(path):
        raise UserError(f"{path}: not a sweep directory (no <run-id>/run.json inside)")
    return path.resolve()

@app.command("results")
def results_cmd(
    directory: Annotated[Path, typer.Argument(help="Sweep directory.")],
    format: Annotated[str, typer.Option("--format", "-f", help="table, csv, json or parquet.")]
    = "table",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write to this file "
                                                "(required for parquet).")] = None,
) -> None:
    """One record per run: parameters, state, samples/s, speedup, efficiency, phases."""
    if format not in ("table", "csv", "json", "parquet"):
        raise UserError(f"--format {format}: valid: table, csv, json, parquet")
    if format == "parquet" and output is None:
        raise UserError("--format parquet needs --output FILE")
    runs_df = results.merge(_sweep_dir(directory))
    if output is not None:
        if format == "parquet":
            runs_df.to_parquet(output, index=False)
        elif format == "csv":
            runs_df.to_csv(output, index=False)
        else:
            output.write_text(json.dumps(results.records(runs_df), indent=2, default=str) + "\n")
        err_console.print(f"wrote {len(runs_df)} run(s) to {output}")
        return
    recs = results.records(runs_df)
    if format == "json":
        sys.stdout.write(json.dumps(recs, indent=2, default=str) + "\n")
    elif format == "csv":
        runs_df.to_csv(sys.stdout, index=False)
    else:
        _print_runs(recs)

@app.command()
def gather(directory: Annotated[Path, typer.Argument(help="Sweep directory.")]) -> None:
    """Update states from the scheduler, then merge every run into results/*.parquet."""
    d = _sweep_dir(directory)
    for scheduler in _schedulers(d):
        execute.refresh(d, scheduler)
    runs_df = results.merge(d)
    err_console.print(f"merged {len(runs_df)} run(s) into {d / 'results'}")
    _print_runs(results.records(runs_df))

@app.command()
def status(directory: Annotated[Path, typer.Argument(help="Sweep directory.")]) -> None:
    """Each run's state from the ledger and the scheduler, with job ids."""
    d = _sweep_dir(directory)
    table = Table("run", "job", "state", "reason", box=None)
    counts: dict[str, int] = {}
    for scheduler in _schedulers(d):
        for run, record, _ in execute.refresh(d, scheduler):
            counts[record.state] = counts.get(record.state, 0) + 1
            style = STATE_STYLE.get(record.state, "")
            reason = (record.reason or "").splitlines()[0][:80] if record.reason else ""
            table.add_row(run.run_id, record.job_id or "-", f"[{style}]{record.state}[/]", reason)
    out_console.print(table)
    out_console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))

@app.command()
def cancel(
    directory: Annotated[Path, typer.Argument(help="Sweep directory.")],
    run_ids: Annotated[list[str] | None, typer.Argument(help="Runs to cancel (default: all "
                                                         "unfinished).")] = None,
) -> None:
    """Cancel unfinished runs of a sweep."""
    d = _sweep_dir(directory)
    known = {p.name for p in rundir.run_dirs(d)}
    for rid in run_ids or []:
        if rid not in known:
            raise UserError(f"{d}: no run '{rid}'")
    done: list[str] = []
    for scheduler in _schedulers(d):
        done += execute.cancel(d, scheduler, run_ids)
    err_console.print(f"cancelled {len(done)} run(s)" + (": " + ", ".join(done) if done else ""))

def _schedulers(d: Path) -> list[str]:
    found = set()
    for rdir in rundir.run_dirs(d):
        record = rundir.read_record(rdir)
        if record is not None:
            found.add(record.scheduler)
    return sorted(found)

def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)

def _print_runs(recs: list[dict]) -> None:
    if not recs:
        out_console.print("no runs")
        return
    cols = ["mode", "model", "partition", "batch_size", "options", "prefetch"]
    multi = {k for k in cols if len({json.dumps(r.get(k), sort_keys=True) for r in recs}) > 1}
    table = Table(box=None, header_style="bold")
    for c in cols:
        if c in multi:
            table.add_column(c)
    for c in ("nodes", "ranks", "samples/s", "speedup", "efficiency", "fabric", "state", "run"):
        table.add_column(c, justify="right" if c in ("nodes", "ranks", "samples/s", "speedup",
                                                    "efficiency") else "left")
    for r in sorted(recs, key=lambda r: (r["mode"], r["model"], r["partition"], r["nodes"])):
        rate = r.get("samples_per_s")
        rate_s = "-" if rate is None else f"{rate:,.0f} ± {r.get('samples_per_s_std') or 0:,.0f}"
        style = STATE_STYLE.get(r["state"], "")
        row = [str(r[c]) if c != "options" else ",".join(f"{k}={v}" for k, v in
                                                        r[c].items()) for c in cols if c in multi]
        row += [str(r["nodes"]), str(r["ranks"]), rate_s, _fmt(r.get("speedup"), ".2f"),
                _fmt(r.get("efficiency"), ".0%"), _fabric_cell(r), f"[{style}]{r['state']}[/]",
                r["run_id"]]
        table.add_row(*row)
    out_console.print(table)

FABRIC_STYLE = {"verified": "green", "mismatch": "bold red", "unverified": "yellow"}


def _fabric_cell(r: dict) -> str:
    verdict = r.get("fabric")
    if not verdict:
        return "-"
    where = f" {r['fabric_iface']}" if r.get("fabric_iface") else ""
    return f"[{FABRIC_STYLE.get(verdict, '')}]{verdict}{where}[/]"


def _print_fabric_mismatches(recs: list[dict]) -> None:
    """At the end of a sweep, loudly: runs whose bytes did not cross the declared fabric."""
    bad = [r for r in recs if r.get("fabric") == "mismatch"]
    if not bad:
        return
    err_console.print(f"[bold red]FABRIC MISMATCH in {len(bad)} run(s): their ranks did not use "
                      "the fabric their partition declares[/]")
    for r in bad:
        err_console.print(f"  [red]{r['run_id']}[/] (partition {r['partition']}, "
                          f"{r['interconnect']}): {r.get('fabric_reason')}")


# --- site ----------------------------------------------------------------------------------

@site_app.command("list")
def site_list() -> None:
    """Sites shipped in site-configs/."""
    table = Table("site", "scheduler", "partitions", "description", box=None)
    for name, path in sitemod.available().items():
        try:
            s, _ = sitemod.load(str(path))
            parts = ", ".join(f"{p.name} ({p.interconnect}, {p.nodes} nodes)" for p in
                              s.partitions)
            table.add_row(name, s.scheduler, parts, s.description)
        except UserError as exc:
            table.add_row(name, "?", "[red]invalid[/]", str(exc).splitlines()[-1])
    out_console.print(table)

@site_app.command("show")
def site_show(name: Annotated[str, typer.Argument(help="Site name or YAML path.")]) -> None:
    """The validated site config, with defaults filled in."""
    s, path = sitemod.load(name)
    out_console.print(f"# {path}", highlight=False)
    import yaml

    out_console.print(yaml.safe_dump(s.model_dump(mode="json"), sort_keys=False),
                      markup=False, highlight=False)

@site_app.command("validate")
def site_validate(path: Annotated[str, typer.Argument(help="Site YAML file.")]) -> None:
    """Validate a site config file; errors give file:line, field and the fix."""
    s, p = sitemod.load(path)
    out_console.print(f"{p}: valid site '{s.name}' ({s.scheduler}, "
                      f"{len(s.partitions)} partition(s))")

@site_app.command("schema")
def site_schema() -> None:
    """The JSON schema of site config files."""
    sys.stdout.write(json.dumps(sitemod.schema(), indent=2) + "\n")

# --- env -----------------------------------------------------------------------------------


@env_app.command("list")
def env_list(site: Annotated[str, typer.Option(help="Site name or YAML path.")] = "local") -> None:
    """The site's environments, their Python, where their build is defined, whether built."""
    s, _ = sitemod.load(site)
    table = Table("environment", "python", "managed by orch", "build from", "built", box=None)
    for name, env in s.environments.items():
        managed = env.build is not None
        table.add_row(name, envs.python_of(env), "yes" if managed else "no",
                      envs.build_source(env),
                      ("yes" if envs.is_built(env) else "[red]no[/]") if managed else "-")
    out_console.print(table)


@env_app.command("build")
def env_build(
    names: Annotated[list[str] | None, typer.Argument(help="Environments (default: all the "
                                                      "site's buildable ones).")] = None,
    site: Annotated[str, typer.Option(help="Site name or YAML path.")] = "local",
    force: Annotated[bool, typer.Option(help="Rebuild even if up to date.")] = False,
) -> None:
    """Create the environments' venvs (once; a changed description rebuilds)."""
    s, path = sitemod.load(site)
    wanted = names or [n for n, e in s.environments.items() if e.build is not None]
    for name in wanted:
        env = s.environment(name, source=str(path))
        envs.build(name, env, force=force, log=lambda m: err_console.print(m, highlight=False))


# --- trace ---------------------------------------------------------------------------------


@app.command()
def trace(
    run_id: Annotated[str, typer.Argument(help="Run id (from orch results).")],
    dir: Annotated[Path | None, typer.Option("--dir", help="Its sweep directory (default: "
                                             "search runs/*).")] = None,
    output: Annotated[Path | None, typer.Option(help="Copy the trace CSV here.")] = None,
) -> None:
    """A run's layer-wise trace (id, name, forward_us, backward_us, comm_us, size_bytes).

    Written by PyTorch runs swept with --option trace=yes; 'orch predict --trace' reads it.
    """
    rdir = rundir.find_run(run_id, dir)
    path = rdir / "ranks" / "trace.csv"
    if not path.is_file():
        raise UserError(f"run '{run_id}' has no layer-wise trace; sweep it again with "
                        f"--option trace=yes (PyTorch modes)")
    text = path.read_text()
    if output:
        output.write_text(text)
        err_console.print(f"wrote {output}")
    else:
        sys.stdout.write(text)


# --- data ----------------------------------------------------------------------------------

data_app = typer.Typer(help="On-disk data sets in each framework's native format.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("make")
def data_make(
    out: Annotated[Path, typer.Option(help="Directory to write (manifest + one dir per format).")],
    dataset: Annotated[str, typer.Option(help="cifar (32x32) or imagenet (224x224).")] = "cifar",
    samples: Annotated[int, typer.Option(help="Number of images.")] = 10000,
    format: Annotated[str, typer.Option("--format", help="Formats, comma-separated: raw "
                                        "(PyTorch), tfrecord, recordio.")] = "raw",
    site: Annotated[str, typer.Option(help="Site whose environments write the formats.")]
    = "local",
    seed: Annotated[int, typer.Option(help="Random seed of the images and labels.")] = 0,
) -> None:
    """Write random images to disk so that sweeps with --data measure real input I/O."""
    from . import data as datamod

    s, _ = sitemod.load(site)
    manifest = datamod.make(out, dataset, samples, list(sweepmod.parse_name_list(format)), s,
                            seed=seed, log=lambda m: err_console.print(m, highlight=False))
    err_console.print(f"{out}: {manifest.samples} {manifest.dataset} samples in "
                      f"{', '.join(manifest.formats)}")


# --- models --------------------------------------------------------------------------------

@app.command()
def models(
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    site: Annotated[str, typer.Option(help="Site whose framework environments count.")]
    = "local",
    catalogue_only: Annotated[bool, typer.Option("--catalogue-only", help="Only the expected "
                                                 "counts; build nothing.")] = False,
) -> None:
    """The model zoo and each model's parameter count, expected and per framework.

    Each framework environment of the site builds every model and counts its parameters (once:
    cached), so the table shows the same network in every framework, or which one differs.
    """
    if format not in ("table", "json"):
        raise UserError(f"--format {format}: valid: table, json")
    from . import zoo_counts

    s, _ = sitemod.load(site)
    frameworks = () if catalogue_only else zoo_counts.FRAMEWORKS
    recs = zoo_counts.table(s, frameworks, log=lambda m: err_console.print(m, highlight=False))
    if format == "json":
        sys.stdout.write(json.dumps(recs, indent=2) + "\n")
        if not all(r["agree"] for r in recs):
            raise typer.Exit(1)
        return
    table = Table("model", "dataset", "expected", *frameworks, "agree", box=None)
    for r in recs:
        for ds, n in r["params"].items():
            cells = [_fmt(r["frameworks"].get(fw, {}).get(ds), ",") for fw in frameworks]
            table.add_row(r["model"], ds, f"{n:,}", *cells,
                          "yes" if r["agree"] else "[red]NO[/]")
    out_console.print(table)
    missing = {fw: why for r in recs for fw, why in r["missing"].items()
               if why != "not implemented in this framework"}
    for fw, why in sorted(missing.items()):
        err_console.print(f"{fw}: {why}", highlight=False)
    if not all(r["agree"] for r in recs):
        raise typer.Exit(1)


# Command groups kept in their own modules (report/predict/netbench/export; containers,
# show, rerun), registered here so that 'orch --help' lists them all.
from .cli_analysis import register as _analysis; _analysis(app)  # noqa: E402, E702, I001
from .cli_container import register as _container; _container(app)  # noqa: E402, E702, I001


def main() -> None:
    try:
        app()
    except UserError as exc:
        err_console.print(f"orch: error: {exc}", markup=False, highlight=False)
        sys.exit(exc.exit_code)
