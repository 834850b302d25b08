"""``orch sweep``: expand a matrix of runs, render, submit, wait, print the scaling table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, print_event, print_fabric_mismatches, print_runs


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
    out: Annotated[Path | None, typer.Option("--out", help="Sweep directory; default "
                                             "runs/<site>. (-o is --option here.)")] = None,
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
    cancel_on_interrupt: Annotated[bool, typer.Option(
        "--cancel-on-interrupt", help="Ctrl-C cancels the sweep's unfinished jobs (without it "
        "they keep running; a second Ctrl-C cancels them).")] = False,
) -> None:
    """Expand a matrix of runs, render their scripts, submit them, and print the scaling table."""
    from .. import backends, envs, execute, results
    from .. import site as sitemod
    from .. import sweep as sweepmod

    for text in option or []:
        if "=" not in text:  # -o is --option here: 'orch sweep -o DIR' must not look valid
            raise UserError(f"--option '{text}': expected NAME=VALUE[,VALUE...] (-o is --option "
                            "in orch sweep; the sweep directory is --out DIR)")
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
    out_dir = check_out(out or Path("runs") / site_obj.name)
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
    try:
        execute.execute(prepared, site_obj, wait=wait, on_event=print_event,
                        require_fabric=require_fabric)
    except KeyboardInterrupt:
        _interrupted(out_dir, site_obj.scheduler, {r.run_id for r in runs}, cancel_on_interrupt)
    if not wait and not backends.scheduler(site_obj.scheduler).sequential:
        err_console.print(f"submitted; follow with: orch status {out_dir}")
        return
    runs_df = results.merge(out_dir)
    ids = {r.run_id for r in runs}
    shown = runs_df[runs_df["run_id"].isin(ids)] if not runs_df.empty else runs_df
    print_runs(results.records(shown))
    print_fabric_mismatches(results.records(shown))
    if any(rec["state"] != "COMPLETED" for rec in results.records(shown)):
        raise typer.Exit(1)


def _yes_no_list(text: str, what: str) -> tuple[bool, ...]:
    from .. import sweep as sweepmod

    values = sweepmod.parse_name_list(text)
    bad = [v for v in values if v not in ("yes", "no")]
    if bad or not values:
        raise UserError(f"{what} {text}: expected yes, no or yes,no")
    return tuple(v == "yes" for v in values)


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


def _interrupted(out_dir: Path, scheduler: str, ids: set[str], cancel_now: bool) -> None:
    """Ctrl-C: say which jobs still run and how to follow or cancel them; cancel them with
    --cancel-on-interrupt or on a second Ctrl-C within the grace period. Exit 130."""
    import time

    from .. import execute

    def unfinished() -> list[tuple[str, str | None]]:
        from ..rundir import TERMINAL, read_record, run_dirs

        out = []
        for rdir in run_dirs(out_dir):
            try:
                rec = read_record(rdir)
            except UserError:
                continue
            if rec and rec.run_id in ids and rec.state not in TERMINAL and rec.job_id:
                out.append((rec.run_id, rec.job_id))
        return out

    live = unfinished()
    if live and not cancel_now:
        err_console.print(f"interrupted: {len(live)} job(s) still running: "
                          + ", ".join(f"{rid} (job {job})" for rid, job in live))
        err_console.print(f"follow them with: orch status {out_dir}  (then orch gather "
                          f"{out_dir}); cancel them with: orch cancel {out_dir}")
        err_console.print("press Ctrl-C again within 5 s to cancel them now")
        try:
            time.sleep(5)
        except KeyboardInterrupt:
            cancel_now = True
    if live and cancel_now:
        done = execute.cancel(out_dir, scheduler, [rid for rid, _ in live])
        err_console.print(f"interrupted: cancelled {len(done)} job(s): {', '.join(done)}")
    elif not live:
        err_console.print("interrupted: no job of this sweep is running")
    raise typer.Exit(130)
