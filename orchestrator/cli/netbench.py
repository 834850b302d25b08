"""``orch netbench``: measure a partition's all-reduce latency α and bandwidth B with a real
job (the network benchmark mode), fit the α–β model (orchestrator.execute.netbench) and store it
for orch report and orch predict."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, out_console


def netbench_cmd(
    site: Annotated[str, typer.Option(help="Site name (orch site list) or path to a site YAML.")],
    partition: Annotated[str | None, typer.Option(help="Partition; default: the site's.")]
    = None,
    nodes: Annotated[int, typer.Option(help="Nodes (ranks = nodes x tasks per node, >= 2).")]
    = 2,
    tasks_per_node: Annotated[int | None, typer.Option(help="Ranks per node; default one per "
                                                       "GPU, or 1 on CPU partitions.")] = None,
    sizes: Annotated[str | None, typer.Option(
        help="Message sizes, comma-separated (K/M/G = 1024^n bytes); default 4 B .. 16 MiB "
        "in steps of 4.")] = None,
    reps: Annotated[int, typer.Option(help="All-reduces per size and iteration.")] = 5,
    iters: Annotated[int, typer.Option(help="Measured iterations (each runs every size).")]
    = 10,
    warmup: Annotated[int, typer.Option(help="Warm-up iterations (not measured).")] = 2,
    backend: Annotated[str | None, typer.Option(help="nccl or gloo; default nccl on GPU "
                                                "partitions, gloo on CPU ones.")] = None,
    model: Annotated[str, typer.Option(help="Also measure this zoo model's gradient size "
                                       "(float32).")] = "lenet5",
    dataset: Annotated[str, typer.Option(help="Dataset of --model.")] = "cifar",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Sweep directory for the job; "
                                             "default runs/<site>.")] = None,
    store: Annotated[Path | None, typer.Option(
        help="Directory of netbench results; default $ORCH_NETBENCH_DIR, else "
        "$XDG_CACHE_HOME/orch/netbench (~/.cache/orch/netbench).")] = None,
    save: Annotated[bool, typer.Option("--save/--no-save", help="Store the fit for report "
                                       "and predict.")] = True,
    time_limit: Annotated[int | None, typer.Option(help="Time limit, minutes.")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    fit_from: Annotated[str, typer.Option(
        help="Fit α and B to the sizes from this many bytes up (K/M/G = 1024^n): the regime of "
        "gradient buckets; smaller messages are measured and shown, not fitted.")] = "64K",
) -> None:
    """Measure all-reduce latency α and bandwidth B of a partition with a real job.

    Runs the allreduce-bench mode (torch.distributed; Gloo, or NCCL on GPU partitions) on
    --nodes nodes, fits the ring all-reduce model 2(N-1)·α + 2(N-1)/N·m/B, and stores it as
    <store>/<site>-<partition>.json for orch report and orch predict.
    """
    from .. import site as sitemod
    from ..execute import netbench as nb
    from ..plan import sweep as sweepmod
    from ..units import parse_sizes

    if format not in ("table", "json"):
        raise UserError(f"--format {format}: valid: table, json")
    if reps < 1:
        raise UserError("--reps: must be at least 1")
    site_obj, _ = sitemod.load(site)
    part = site_obj.partition(partition)
    tpn = tasks_per_node or part.gpus_per_node or 1
    if nodes * tpn < 2:
        raise UserError(f"--nodes {nodes} x {tpn} task(s) per node = 1 rank: an all-reduce "
                        "over one rank sends nothing; use --nodes 2 (or more tasks per node)")
    spec = sweepmod.SweepSpec(nodes=(nodes,), modes=(nb.MODE,), models=(model,),
                              dataset=dataset, partitions=(part.name,),
                              tasks_per_node=tasks_per_node, iters=iters, warmup=warmup,
                              time_limit_min=time_limit,
                              options=_bench_options(reps, sizes, backend))
    runs = sweepmod.expand(spec, site_obj)
    out_dir = (out or Path("runs") / site_obj.name).resolve()
    run_dir = _measure(runs, site_obj, out_dir, f"{site_obj.name}/{part.name}")
    result = nb.fit_run(run_dir, fit_from=parse_sizes(fit_from, "--fit-from")[0])
    path = nb.save(result, nb.store_path(site_obj.name, part.name, store)) if save else None
    if format == "json":
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        _print_fit(result, f"{site_obj.name}/{part.name}")
    if path is not None:
        err_console.print(f"stored {path}", highlight=False, markup=False)


def _bench_options(reps: int, sizes: str | None, backend: str | None) -> dict:
    """The benchmark mode's options from the command's flags."""
    from ..units import parse_sizes

    options = {"reps": (str(reps),)}
    if sizes is not None:
        options["sizes"] = (":".join(str(n) for n in parse_sizes(sizes, "--sizes")),)
    if backend is not None:
        options["backend"] = (backend,)
    return options


def _measure(runs, site_obj, out_dir: Path, where: str) -> Path:
    """Run the benchmark's one run (unless it already ran) and merge its results: its run
    directory."""
    from .. import execute, results
    from ..site import envs

    envs.check(site_obj, {r.framework for r in runs})
    prepared = execute.prepare(runs, site_obj, out_dir)
    run = runs[0]
    verb = "already measured" if prepared[0].action == "skip" else "submitting"
    err_console.print(f"netbench {where}: {run.ranks} ranks on {run.nodes} "
                      f"node(s), {verb}: {out_dir / run.run_id}", highlight=False)
    execute.execute(prepared, site_obj, wait=True, on_event=_print_event)
    keys = results.recheck(out_dir)  # the run records first: merge only reads
    results.merge(out_dir, keys)
    return out_dir / run.run_id


def _print_fit(result, where: str) -> None:
    """Each size as measured, its algorithm and bus bandwidth, the fit's model beside it."""
    from rich.table import Table as RichTable

    from ..execute import netbench as nb

    table = RichTable(box=None, header_style="bold",
                      title=f"all-reduce over {result.workers} ranks ({result.backend}), "
                      f"median of {result.iterations} iterations, slowest rank",
                      title_justify="left")
    for c in ("bytes", "measured µs", "algbw GB/s", "busbw GB/s", "model µs",
              "model / measured"):
        table.add_column(c, justify="right")
    for size, t, m, bus in zip(result.sizes, result.seconds, result.model_seconds(),
                               result.bus_bandwidths(), strict=True):
        fitted = "" if size >= result.fit_from else " (not fitted)"
        table.add_row(f"{size:,}", f"{t * 1e6:,.1f}", f"{nb.algbw(size, t) / 1e9:.3f}",
                      f"{bus / 1e9:.3f}", f"{m * 1e6:,.1f}", f"{m / t:.2f}{fitted}")
    out_console.print(table)
    out_console.print(f"{where}: {result.describe()}", markup=False, highlight=False)


def _print_event(run, record) -> None:
    job = f" job {record.job_id}" if record.job_id else ""
    reason = f": {record.reason.splitlines()[0]}" if record.reason else ""
    err_console.print(f"  {run.run_id}{job} {record.state}{reason}", highlight=False,
                      markup=False)
