"""``orch report``, ``orch predict``, ``orch netbench`` and ``orch export``: from result sets to
answers.

The work is done by pure functions (orchestrator/report/, perfmodel.py, netbench.py); this
module parses options, reads and writes files, prints, and turns bad input into one line and
exit code 2 (:class:`~orchestrator.errors.UserError`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, out_console, renamed

# --- loading a result set ------------------------------------------------------------------


def load_result_set(directory: Path):
    """(runs, iterations, sweep dir or None) of a sweep directory or a results/ directory.

    A sweep directory is merged first (like ``orch results``), so the report is never stale;
    a directory that only holds ``results/*.parquet`` (or the Parquet files themselves) is read
    as it is.
    """
    import pandas as pd

    from .. import results, rundir

    if not directory.is_dir():
        raise UserError(f"{directory}: no such directory; give a sweep directory (orch sweep "
                        "--out) or its results/ directory")
    directory = directory.resolve()
    sweep = None
    if rundir.run_dirs(directory):
        results.merge(directory)
        sweep = directory
        res = directory / "results"
    elif (directory / "results" / "runs.parquet").is_file():
        res = directory / "results"
    elif (directory / "runs.parquet").is_file():
        res = directory
    else:
        raise UserError(f"{directory}: not a sweep directory (no <run-id>/run.json) and no "
                        "results/runs.parquet; run orch sweep first")
    runs = pd.read_parquet(res / "runs.parquet")
    iters_path = res / "iterations.parquet"
    iters = pd.read_parquet(iters_path) if iters_path.is_file() else pd.DataFrame(
        columns=["run_id", "rank", "host", "iter", "warmup_iter", "t_iter"])
    if runs.empty:
        raise UserError(f"{directory}: the result set has no runs")
    return runs, iters, sweep


def load_epochs(directory: Path):
    """``epochs.parquet`` of a result set (a sweep directory or its results/), if it has one:
    the sweep had runs with --epochs."""
    import pandas as pd

    for path in (directory / "results" / "epochs.parquet", directory / "epochs.parquet"):
        if path.is_file():
            return pd.read_parquet(path)
    return None


def load_scorecard(directory: Path, sweep: Path | None, runs):
    """The scorecard of the predictions a sweep stated before its runs: scored from the sweep
    directory (and kept as results/predictions.parquet), or read from a result set's
    predictions.parquet; None when the sweep stated none."""
    import pandas as pd

    from .. import predictions

    if sweep is not None:
        return predictions.scorecard_of_sweep(sweep, runs)
    d = directory.resolve()
    for path in (d / "results" / predictions.PARQUET, d / predictions.PARQUET):
        if path.is_file():
            return pd.read_parquet(path)
    return None


def comm_lookup(sweep: Path | None, explicit: Path | None):
    """``(site, partition) -> CommModel``: netbench α–β (cached), or none and why."""
    from .. import netbench as nb
    from .. import preflight
    from ..report import CommModel

    cache: dict[tuple[str, str], CommModel] = {}

    def comm(site: str, partition: str) -> CommModel:
        if (site, partition) not in cache:
            result, source = nb.lookup(site, partition, sweep=sweep, explicit=explicit)
            ab = result.alpha_beta if result else None
            pre = preflight.load_sweep(sweep).get(partition) if sweep and ab is None else None
            if pre is not None and pre.site == site:  # the sweep's own pre-flight, not circular
                ab, source = pre.inter.alpha_beta, (f"pre-flight of this sweep (inter-node, run "
                                                    f"{pre.inter.run_id})")
            cache[site, partition] = CommModel(ab, source)
        return cache[site, partition]

    return comm


def print_table(table) -> None:
    """A report.Table on the terminal."""
    from rich.table import Table as RichTable

    rich = RichTable(title=table.title, title_justify="left", title_style="bold",
                     header_style="bold", box=None, padding=(0, 1))
    for i, col in enumerate(table.columns):
        rich.add_column(col, justify="left" if table.is_text(i) else "right", overflow="fold")
    for row in table.rows:
        rich.add_row(*row)
    if not table.rows:
        rich.add_row("(no runs)", *[""] * (len(table.columns) - 1))
    out_console.print(rich)
    if table.note:
        out_console.print(f"  {table.note}", style="dim", markup=False, highlight=False)
    out_console.print()


# --- orch report ---------------------------------------------------------------------------


def report_cmd(
    directory: Annotated[Path, typer.Argument(metavar="SWEEP", help="Sweep directory (or its "
                                              "results/).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Where to write report.md, "
                                             "report.html and the PNGs; default SWEEP/report.")]
    = None,
    netbench_file: Annotated[Path | None, typer.Option(
        "--netbench", help="α–β from this netbench result file (or a directory of "
        "<site>-<partition>.json); default: the sweep's own allreduce-bench runs, else "
        "orch netbench's store.")] = None,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="Draw the PNG figures.")]
    = True,
) -> None:
    """Tables on the terminal, PNG plots, and a Markdown + self-contained HTML report.

    Throughput, speedup and efficiency per node count; phase breakdown; exposed vs total
    communication; per-rank spread and stragglers; and, for every run, the speedup the
    performance model predicts from the 1-node breakdown, next to the measured one.
    """
    from .. import report as rep

    runs, iters, sweep = load_result_set(directory)
    if netbench_file is not None and not netbench_file.exists():
        raise UserError(f"--netbench {netbench_file}: no such file or directory")
    title = f"orch report: {sweep or directory.resolve()}"
    report = rep.build(runs, iters, comm_lookup(sweep, netbench_file), title=title,
                       figures=plots, scorecard=load_scorecard(directory, sweep, runs),
                       epochs=load_epochs(directory))
    for line in report.summary:
        out_console.print(line, markup=False, highlight=False)
    if report.summary:
        out_console.print()
    for table in report.tables:
        print_table(table)
    target = (out or (sweep or directory.resolve()) / "report").resolve()
    target.mkdir(parents=True, exist_ok=True)
    for name, png in report.figures.items():
        (target / name).write_bytes(png)
    (target / "report.md").write_text(rep.to_markdown(report))
    (target / "report.html").write_text(rep.to_html(report))
    written = ["report.md", "report.html", *report.figures]
    err_console.print(f"wrote {target}/{{{','.join(written)}}}", highlight=False, markup=False)


# --- orch predict --------------------------------------------------------------------------


def _workers(text: str | None, default: list[int]) -> list[int]:
    from ..sweep import parse_int_list

    return list(parse_int_list(text, "--workers")) if text else default


def _alpha_beta(netbench_file: Path | None, site: str | None, partition: str | None,
                sweep: Path | None, bandwidth: str | None, latency: str | None):
    """(AlphaBeta or None, description): netbench result, then the what-if overrides."""
    from .. import netbench as nb
    from .. import units
    from ..perfmodel import AlphaBeta

    result, source = None, "no netbench result given (--netbench FILE, or --site and --partition)"
    if netbench_file is not None:
        if not netbench_file.exists():
            raise UserError(f"--netbench {netbench_file}: no such file or directory")
        if netbench_file.is_dir() and not (site and partition):
            raise UserError(f"--netbench {netbench_file} is a directory: also give --site "
                            "and --partition to pick <site>-<partition>.json")
        result, source = nb.lookup(site or "", partition or "", explicit=netbench_file)
        if result is None:
            raise UserError(f"--netbench {netbench_file}: {source}")
    elif site and partition:
        result, source = nb.lookup(site, partition, sweep=sweep)
    alpha = result.alpha if result else None
    bandwidth_v = result.bandwidth if result else None
    what_if = []
    if bandwidth is not None:
        bandwidth_v = units.parse_bandwidth(bandwidth)
        what_if.append(f"B = {units.format_bandwidth(bandwidth_v)}")
    if latency is not None:
        alpha = units.parse_latency(latency)
        what_if.append(f"α = {units.format_seconds(alpha)}")
    if alpha is None and bandwidth_v is None:
        return None, source
    if alpha is None or bandwidth_v is None:
        missing = "--latency" if alpha is None else "--bandwidth"
        raise UserError(f"{missing} is needed too: there is no netbench result to take it from "
                        f"({source}); give both --bandwidth and --latency, or --netbench FILE")
    desc = source if result else "what-if"
    if what_if:
        desc = f"{desc}; what-if {', '.join(what_if)}" if result else "what-if " + ", ".join(
            what_if)
    return AlphaBeta(alpha=alpha, bandwidth=bandwidth_v), desc


def _grad_bytes(grad_bytes: str | None, model: str | None, dataset: str) -> int | None:
    from ..modes.allreduce_bench.mode import parse_bytes
    from ..report import gradient_bytes

    if grad_bytes is not None:
        value = parse_bytes(grad_bytes, "--grad-bytes")
        if value <= 0:
            raise UserError(f"--grad-bytes {grad_bytes}: must be a positive byte count")
        return value
    if model is not None:
        value = gradient_bytes(model, dataset)
        if value is None:
            from .. import zoo

            raise UserError(f"--model {model} --dataset {dataset}: not in the model zoo; valid: "
                            f"{', '.join(zoo.MODELS)} (or give --grad-bytes)")
        return value
    return None


def _select_config(runs, run_id: str | None, mode: str | None, model: str | None,
                   partition: str | None, batch_size: int | None, directory: Path):
    from .. import report as rep

    train = rep.training_runs(runs)
    if run_id is not None:
        hit = train[train["run_id"] == run_id]
        if hit.empty:
            raise UserError(f"--run {run_id}: no such run of a training mode in {directory}")
        configs = rep.config_of(train)
        return train[configs == configs.loc[hit.index[0]]]
    sel = train
    for col, value in (("mode", mode), ("model", model), ("partition", partition),
                       ("batch_size", batch_size)):
        if value is not None:
            sel = sel[sel[col] == value]
    if sel.empty:
        raise UserError(f"{directory}: no training run matches the selection (--mode, --model, "
                        "--partition, --batch-size)")
    configs = rep.config_of(sel)
    if configs.nunique() > 1:
        labels = rep.config_labels(sel)
        pick = ", ".join(f"'{labels[c]}' (--run {sel[configs == c]['run_id'].iloc[0]})"
                         for c in sorted(configs.unique()))
        raise UserError(f"{directory}: the selection matches {configs.nunique()} "
                        f"configurations: {pick}; narrow it with --mode/--model/--partition/"
                        "--batch-size or pick one with --run RUN_ID")
    return sel


def predict_cmd(
    results_dir: Annotated[Path | None, typer.Option(
        "--results", help="(a) A sweep directory: predict from its 1-node measured breakdown "
        "(select with --run or --mode/--model/--partition/--batch-size).")] = None,
    breakdown: Annotated[Path | None, typer.Option(
        help="(b) A breakdown file (JSON/YAML): t_io, t_h2d, t_f, t_b, t_u, t_comm in seconds, "
        "each a number or a map worker-count -> number.")] = None,
    trace: Annotated[Path | None, typer.Option(
        help="(c) A layer-wise trace CSV: id,name,forward_us,backward_us,comm_us,size_bytes; "
        "a row named 'data' is the I/O time.")] = None,
    workers: Annotated[str | None, typer.Option(
        help="Worker counts, comma-separated; default: the measured ones (--results), else "
        "1,2,4,8.")] = None,
    overlap: Annotated[str | None, typer.Option(
        help="none: communication after backward; wfbp: behind it (wait-free back-prop). "
        "Default: none; with --results the mode's own (torch-ddp, horovod: wfbp).")] = None,
    prefetch: Annotated[str, typer.Option(help="yes: I/O pipelined with compute "
                                          "(t = max(io+h2d, rest)); no: sequential.")] = "no",
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    bandwidth: Annotated[str | None, typer.Option(
        help="What-if link bandwidth B, e.g. 10Gb/s, 100Gbit, 12.5GB/s or bytes/s.")] = None,
    latency: Annotated[str | None, typer.Option(
        help="What-if latency α per message step, e.g. 2us, 500ns or seconds.")] = None,
    netbench_file: Annotated[Path | None, typer.Option(
        "--netbench", help="α–β from this netbench result (file, or directory with --site "
        "--partition).")] = None,
    site: Annotated[str | None, typer.Option(help="Site whose stored netbench α–β to use "
                                             "(with --partition).")] = None,
    partition: Annotated[str | None, typer.Option(help="Partition (result-set selection, or "
                                                  "netbench α–β with --site).")] = None,
    grad_bytes: Annotated[str | None, typer.Option(
        help="Gradient bytes all-reduced per iteration (α–β with --breakdown), e.g. 98M.")]
    = None,
    model: Annotated[str | None, typer.Option(
        help="Zoo model: its float32 gradient size (--breakdown), or result-set selection.")]
    = None,
    dataset: Annotated[str, typer.Option(help="Dataset of --model's gradient size.")] = "cifar",
    run: Annotated[str | None, typer.Option("--run", help="Result-set selection: this run's "
                                            "configuration.")] = None,
    mode: Annotated[str | None, typer.Option(help="Result-set selection: mode.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Result-set selection: batch size.")]
    = None,
    bucket_size: Annotated[str | None, typer.Option(
        help="With --trace and --overlap wfbp: merge gradients into messages of this many "
        "bytes (e.g. 25M).")] = None,
    tasks_per_node: Annotated[int | None, typer.Option(
        help="Ranks per node of the predicted runs (two-level network: ranks of a node talk "
        "over the intra-node α–β). Default: the result set's, else 1.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(
        help="What-if: GPUs (ranks) per node; the same as --tasks-per-node.")] = None,
    pattern: Annotated[str | None, typer.Option(
        help="Communication model: allreduce, hierarchical-allreduce, parameter-server, "
        "allgather-reducescatter. Default: the mode's declared pattern (--results), else "
        "allreduce.")] = None,
    servers: Annotated[int | None, typer.Option(
        help="Parameter servers (pattern parameter-server); default: the mode's placement, "
        "else 1.")] = None,
    intra_bandwidth: Annotated[str | None, typer.Option(
        help="What-if bandwidth inside a node (e.g. 100GB/s for NVLink).")] = None,
    intra_latency: Annotated[str | None, typer.Option(
        help="What-if latency inside a node (e.g. 5us).")] = None,
) -> None:
    """Speedup and iteration time at given worker counts, from the performance model.

    Inputs: (a) --results DIR, (b) --breakdown FILE or (c) --trace FILE. Communication: the
    input's own, or the α–β all-reduce model from a netbench result (--netbench, or the
    partition's stored one) with what-if overrides --bandwidth / --latency.

    Two-level model (--tasks-per-node, --gpus-per-node, --pattern, --servers,
    --intra-bandwidth/--intra-latency, or a result set whose sweep ran a pre-flight): the
    pattern's model on the intra- and inter-node α–β, extrapolated to any worker count, e.g.
    --workers 64,256,1024 --tasks-per-node 4.
    """
    from .. import perfmodel

    given = [name for name, v in (("--results", results_dir), ("--breakdown", breakdown),
                                  ("--trace", trace)) if v is not None]
    if len(given) != 1:
        raise UserError("give exactly one input: --results DIR, --breakdown FILE or --trace "
                        f"FILE (got {', '.join(given) or 'none'})")
    if format not in ("table", "json"):
        raise UserError(f"--format {format}: valid: table, json")
    if prefetch not in ("yes", "no"):
        raise UserError(f"--prefetch {prefetch}: valid: yes, no")
    if overlap is not None and overlap not in ("none", "wfbp"):
        raise UserError(f"--overlap {overlap}: valid: none, wfbp")
    pre = prefetch == "yes"
    measured: dict[int, dict] = {}
    two_level = TwoLevel(tasks_per_node, gpus_per_node, pattern, servers, intra_bandwidth,
                         intra_latency)
    if two_level.wanted(results_dir):
        rows, header = _predict_two_level(
            two_level, results_dir, breakdown, trace, run, mode, model, partition, batch_size,
            workers, overlap, pre, bandwidth, latency, netbench_file, site, grad_bytes,
            dataset, bucket_size)
        if format == "json":
            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return
        err_console.print(header, markup=False, highlight=False)
        _print_predictions(rows, any(r.get("measured_t_iter") is not None for r in rows))
        return
    if results_dir is not None:
        rows, header = _predict_results(results_dir, run, mode, model, partition, batch_size,
                                        workers, overlap, pre, bandwidth, latency,
                                        netbench_file, grad_bytes, measured)
    elif breakdown is not None:
        source = perfmodel.load_breakdown(breakdown)
        ab, ab_desc = _alpha_beta(netbench_file, site, partition, None, bandwidth, latency)
        grad = _grad_bytes(grad_bytes, model, dataset)
        if ab is not None and grad is None:
            raise UserError("α–β communication needs the gradient size: give --grad-bytes N or "
                            "--model NAME [--dataset D]")
        if ab is not None and source.t_comm != 0.0:
            err_console.print(f"note: t_comm of {breakdown} is replaced by the α–β all-reduce "
                              f"of {grad:,} bytes", markup=False, highlight=False)
            source = source.model_copy(update={"t_comm": 0.0})
        counts = _workers(workers, [1, 2, 4, 8])
        preds = perfmodel.predict(source, counts, overlap=overlap or "none", prefetch=pre,
                                  alpha_beta=ab, grad_bytes=grad if ab is not None else None)
        rows = [p.model_dump() for p in preds]
        header = (f"breakdown {breakdown}; communication: "
                  + (f"α–β ({ab_desc}), all-reduce of {grad:,} bytes" if ab is not None
                     else "t_comm as given"))
        _add_ab(rows, ab, ab_desc)
    else:
        source = perfmodel.load_trace_csv(trace)
        ab, ab_desc = _alpha_beta(netbench_file, site, partition, None, bandwidth, latency)
        bucket = None
        if bucket_size is not None:
            from ..modes.allreduce_bench.mode import parse_bytes

            bucket = parse_bytes(bucket_size, "--bucket-size")
        counts = _workers(workers, [1, 2, 4, 8])
        preds = perfmodel.predict(source, counts, overlap=overlap or "none", prefetch=pre,
                                  alpha_beta=ab, bucket_bytes=bucket)
        rows = [p.model_dump() for p in preds]
        header = (f"trace {trace} ({len(source.layers)} layers); communication: "
                  + (f"α–β ({ab_desc})" if ab is not None else "comm_us as traced"))
        _add_ab(rows, ab, ab_desc)
    if format == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    err_console.print(header, markup=False, highlight=False)
    _print_predictions(rows, bool(measured))


class TwoLevel:
    """The two-level options of ``orch predict`` (tasks per node, pattern, intra-node
    what-ifs); any of them, or a result set with a pre-flight, selects the two-level model."""

    def __init__(self, tasks_per_node, gpus_per_node, pattern, servers, intra_bandwidth,
                 intra_latency):
        if tasks_per_node is not None and gpus_per_node is not None and (
                tasks_per_node != gpus_per_node):
            raise UserError(f"--tasks-per-node {tasks_per_node} and --gpus-per-node "
                            f"{gpus_per_node} disagree: give one")
        self.tasks = tasks_per_node if tasks_per_node is not None else gpus_per_node
        if self.tasks is not None and self.tasks < 1:
            raise UserError(f"--tasks-per-node {self.tasks}: must be at least 1")
        if servers is not None and servers < 1:
            raise UserError(f"--servers {servers}: must be at least 1")
        from ..perfmodel import PATTERN_MODELS

        if pattern is not None and pattern not in PATTERN_MODELS:
            raise UserError(f"--pattern {pattern}: no model for this communication pattern; "
                            f"patterns with one: {', '.join(PATTERN_MODELS)}")
        self.pattern, self.servers = pattern, servers
        self.intra_bandwidth, self.intra_latency = intra_bandwidth, intra_latency

    def wanted(self, results_dir: Path | None) -> bool:
        given = (self.tasks, self.pattern, self.servers, self.intra_bandwidth,
                 self.intra_latency)
        if any(v is not None for v in given):
            return True
        if results_dir is not None and results_dir.is_dir():
            return (results_dir / "preflight.json").is_file()
        return False


def _network(sweep: Path | None, partition: str | None, site: str | None,
             netbench_file: Path | None, bandwidth: str | None, latency: str | None,
             two: TwoLevel):
    """(Network, description): the sweep's pre-flight (both levels), else a netbench result
    (inter-node only), then the what-ifs."""
    from .. import preflight as pf
    from .. import units
    from ..perfmodel import AlphaBeta, Network

    pre = pf.load_sweep(sweep).get(partition or "") if sweep is not None else None
    if pre is not None and netbench_file is None:
        inter, intra = pre.inter.alpha_beta, pre.intra.alpha_beta if pre.intra else None
        desc = [f"pre-flight of {sweep}: {pre.inter.describe()}"]
        if pre.intra:
            desc.append(pre.intra.describe())
    else:
        inter, src = _alpha_beta(netbench_file, site, partition, sweep, bandwidth, latency)
        if inter is None:
            raise UserError("the two-level model needs an inter-node α–β: a result set with a "
                            "pre-flight, --netbench FILE, --site/--partition with a stored "
                            f"netbench, or --bandwidth and --latency ({src})")
        intra, desc = None, [f"inter: {src}"]
        bandwidth = latency = None  # already applied
    if bandwidth is not None or latency is not None:
        inter = AlphaBeta(alpha=units.parse_latency(latency) if latency else inter.alpha,
                          bandwidth=units.parse_bandwidth(bandwidth) if bandwidth
                          else inter.bandwidth)
        desc.append(f"what-if inter: α = {units.format_seconds(inter.alpha)}, B = "
                    f"{units.format_bandwidth(inter.bandwidth)}")
    if two.intra_bandwidth is not None or two.intra_latency is not None:
        base = intra or inter
        intra = AlphaBeta(
            alpha=units.parse_latency(two.intra_latency, "--intra-latency")
            if two.intra_latency else base.alpha,
            bandwidth=units.parse_bandwidth(two.intra_bandwidth, "--intra-bandwidth")
            if two.intra_bandwidth else base.bandwidth)
        desc.append(f"what-if intra: α = {units.format_seconds(intra.alpha)}, B = "
                    f"{units.format_bandwidth(intra.bandwidth)}")
    if intra is None:
        desc.append("intra: none measured, the inter-node α–β is used inside nodes too")
    return Network(inter=inter, intra=intra), "; ".join(desc), pre


def _predict_two_level(two, results_dir, breakdown, trace, run_id, mode, model, partition,
                       batch_size, workers, overlap, prefetch, bandwidth, latency,
                       netbench_file, site, grad_bytes, dataset, bucket_size):
    """Predictions on the two-level network with the pattern's model, to any worker count."""
    import math

    from .. import perfmodel, predictions
    from .. import report as rep

    if trace is not None:
        source = perfmodel.load_trace_csv(trace)
        net, net_desc, _ = _network(None, partition, site, netbench_file, bandwidth, latency,
                                    two)
        tasks = two.tasks or 1
        pat = two.pattern or "allreduce"
        bucket = None
        if bucket_size is not None:
            from ..modes.allreduce_bench.mode import parse_bytes

            bucket = parse_bytes(bucket_size, "--bucket-size")
        rows = perfmodel.predict_trace_network(
            source, _workers(workers, [1, 2, 4, 8]), tasks, net, pattern=pat,
            overlap=overlap or "none", prefetch=prefetch, bucket_bytes=bucket,
            servers=two.servers or 1)
        header = (f"trace {trace} ({len(source.layers)} layers), {tasks} rank(s) per node; "
                  f"model: {pat} per layer message, overlap {overlap or 'none'}; network: "
                  f"{net_desc}")
        for r in rows:
            r.update(pattern=pat, tasks_per_node=tasks, network=net_desc, source="trace")
        return rows, header
    if breakdown is not None:
        source = perfmodel.load_breakdown(breakdown)
        net, net_desc, _ = _network(None, partition, site, netbench_file, bandwidth, latency,
                                    two)
        grad = _grad_bytes(grad_bytes, model, dataset)
        if grad is None:
            raise UserError("the pattern model needs the gradient size: give --grad-bytes N or "
                            "--model NAME [--dataset D]")
        b1 = source.at(1)
        phases = {p: b1.phase_at(p, 1) for p in perfmodel.PHASES}
        base_t = perfmodel.iteration_time(source, 1, prefetch=prefetch)
        tasks, pat = two.tasks or 1, two.pattern or "allreduce"

        def comm(w: int, nodes: int, t: int) -> float:
            return perfmodel.pattern_comm_time(pat, grad, w, t, net, servers=two.servers or 1)

        load = None
        base = {"phases": phases, "t_iter": base_t, "ranks": 1, "nodes": 1, "tasks": 1,
                "jitter": 0.0, "smallest_t": base_t, "smallest": 1}
        label = f"breakdown {breakdown}"
        ov = overlap or "none"
        measured: dict[int, float] = {}
    else:
        runs, _iters, sweep = load_result_set(results_dir)
        sel = _select_config(runs, run_id, mode, model, partition, batch_size, results_dir)
        first = sel.iloc[0]
        done = rep.completed(sel)
        if done.empty:
            raise UserError(f"{results_dir}: the selected configuration has no completed run "
                            "to take a breakdown from")
        top = done[done["ranks"] == done["ranks"].max()]
        small = done[done["ranks"] == done["ranks"].min()]
        net, net_desc, pre = _network(sweep, str(first["partition"]), str(first["site"]),
                                      netbench_file, bandwidth, latency, two)
        load = pre.compute_load if pre is not None and pre.shared_machine_cpus() else None
        if load is not None:
            net_desc += (f"; the pre-flight found the nodes on one machine of "
                         f"{pre.shared_machine_cpus()} cores: compute scales with ranks per "
                         "core")
        grad = _grad_bytes(grad_bytes, None, "cifar") or rep.gradient_bytes(
            str(first["model"]), str(first["dataset"]))
        if grad is None:
            raise UserError(f"model '{first['model']}' is not in the zoo: give --grad-bytes N")
        opts = predictions._options(first.get("options"))
        pat, fn = predictions.comm_function(str(first["mode"]), opts, grad, net,
                                            pattern=two.pattern, servers=two.servers)
        tasks = two.tasks or int(top["tasks_per_node"].iloc[0])

        def comm(w: int, nodes: int, t: int) -> float:
            return fn(w, nodes, t)

        base = {"phases": {p: float(top[p].mean()) for p in perfmodel.PHASES},
                "t_iter": float(top["t_iter"].mean()), "ranks": int(top["ranks"].iloc[0]),
                "nodes": int(top["nodes"].iloc[0]),
                "tasks": int(top["tasks_per_node"].iloc[0]),
                "jitter": predictions.compute_jitter(top),
                "smallest_t": float(small["t_iter"].mean()),
                "smallest": int(small["ranks"].iloc[0])}
        ov = overlap or rep.overlap_of(str(first["mode"]), first.get("options"), grad)
        measured = {int(w): float(g["t_iter"].mean()) for w, g in done.groupby("ranks")}
        label = (f"{results_dir} '{first['mode']} {first['model']}': breakdown of run(s) "
                 f"{', '.join(top['run_id'])} ({base['ranks']} rank(s))")
    counts = _workers(workers, [1, 2, 4, 8, 16, 64, 256, 1024])
    rows = []
    for w in counts:
        t = min(tasks, w)
        nodes = math.ceil(w / t)
        pred = perfmodel.predict_from_measured(
            base["phases"], base["t_iter"], comm(base["ranks"], base["nodes"], base["tasks"]),
            comm(w, nodes, t), overlap=ov, prefetch=prefetch, jitter=base["jitter"],
            base_workers=base["ranks"], workers=w,
            compute_scale=load(w) / load(base["ranks"]) if load else 1.0)
        speedup = (w / base["smallest"]) * base["smallest_t"] / pred["t_iter"]
        meas = measured.get(w)
        rows.append({"workers": w, "nodes": nodes, "tasks_per_node": t, **pred,
                     "speedup": speedup, "efficiency": speedup / (w / base["smallest"]),
                     "measured_t_iter": meas, "pattern": pat, "overlap": ov,
                     "network": net_desc, "source": label,
                     "measured_speedup": None, "residual_speedup": None})
    header = (f"{label}; model: {pat} (overlap {ov}), {tasks} rank(s) per node, gradient "
              f"{grad:,} bytes; network: {net_desc}")
    return rows, header


def _add_ab(rows: list[dict], ab, desc: str) -> None:
    for row in rows:
        row["alpha"] = ab.alpha if ab is not None else None
        row["bandwidth"] = ab.bandwidth if ab is not None else None
        row["comm_source"] = desc if ab is not None else "input"


def _predict_results(directory, run_id, mode, model, partition, batch_size, workers, overlap,
                     prefetch, bandwidth, latency, netbench_file, grad_bytes, measured):
    from .. import report as rep

    runs, _iters, sweep = load_result_set(directory)
    sel = _select_config(runs, run_id, mode, model, partition, batch_size, directory)
    first = sel.iloc[0]
    base = rep.baseline(sel)
    label = rep.config_labels(runs).get(rep.config_of(sel).iloc[0], first["mode"])
    if base is None:
        raise UserError(f"{directory}: configuration '{label}' has no completed 1-node run to "
                        "take the breakdown from; sweep it with --nodes 1")
    phases, base_w = base
    ab, ab_desc = _alpha_beta(netbench_file, str(first["site"]), str(first["partition"]),
                              sweep, bandwidth, latency)
    grad = _grad_bytes(grad_bytes, None, "cifar") or rep.gradient_bytes(str(first["model"]),
                                                                       str(first["dataset"]))
    if ab is not None and grad is None:
        raise UserError(f"model '{first['model']}' is not in the zoo: give --grad-bytes N")
    done = rep._completed(sel)
    for w, g in done.groupby("ranks"):
        measured[int(w)] = {
            "t_comm": (float(g["t_comm"].mean()), rep._num(g["t_comm_total"].mean())),
            "speedup": rep._num(g["speedup"].astype(float).mean()),
            "t_iter": float(g["t_iter"].mean()),
        }
    counts = _workers(workers, sorted(measured))
    ov = overlap or rep.overlap_of(str(first["mode"]), first.get("options"), grad)
    try:
        rows = rep.predict_from_baseline(
            phases, base_w, counts, alpha_beta=ab, grad_bytes=grad,
            measured_comm={w: m["t_comm"] for w, m in measured.items()}, overlap=ov,
            prefetch=prefetch)
    except UserError as exc:
        raise UserError(f"{directory} ({label}): {exc}; measured worker counts: "
                        f"{', '.join(map(str, sorted(measured)))}") from None
    for row in rows:
        m = measured.get(row["workers"])
        row["measured_speedup"] = m["speedup"] if m else None
        row["measured_t_iter"] = m["t_iter"] if m else None
        row["residual_speedup"] = (m["speedup"] - row["speedup"]
                                   if m and m["speedup"] is not None else None)
    _add_ab(rows, ab, ab_desc)
    if ab is None:
        for row in rows:
            row["comm_source"] = "measured (no netbench result: " + ab_desc + ")"
    comm = (f"α–β ({ab_desc}), all-reduce of {grad:,} bytes" if ab is not None
            else f"as measured at each worker count ({ab_desc})")
    header = (f"{directory} '{label}': 1-node breakdown ({base_w} worker(s)) of run(s) "
              f"{', '.join(sel[sel['nodes'] == 1]['run_id'])}; overlap {ov}; communication: "
              f"{comm}")
    return rows, header


def _print_predictions(rows: list[dict], with_measured: bool) -> None:
    from rich.table import Table as RichTable

    from ..report import _fmt, ms

    table = RichTable(box=None, header_style="bold")
    cols = ["workers", "t_iter ms", "speedup", "efficiency", "comm exposed ms",
            "comm total ms"]
    if with_measured:
        cols += ["measured speedup", "residual", "measured t_iter ms"]
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        cells = [str(r["workers"]), ms(r["t_iter"], 3), _fmt(r["speedup"], ".2f"),
                 _fmt(r["efficiency"], ".0%"), ms(r["t_comm_exposed"], 3),
                 ms(r["t_comm_total"], 3)]
        if with_measured:
            cells += [_fmt(r.get("measured_speedup"), ".2f"),
                      _fmt(r.get("residual_speedup"), "+.2f"), ms(r.get("measured_t_iter"), 3)]
        table.add_row(*cells)
    out_console.print(table)


# --- orch netbench -------------------------------------------------------------------------


def netbench_cmd(
    site: Annotated[str, typer.Option(help="Site name (site-configs/) or path to a site YAML.")],
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
) -> None:
    """Measure all-reduce latency α and bandwidth B of a partition with a real job.

    Runs the allreduce-bench mode (torch.distributed; Gloo, or NCCL on GPU partitions) on
    --nodes nodes, fits the ring all-reduce model 2(N-1)·α + 2(N-1)/N·m/B, and stores it as
    <store>/<site>-<partition>.json for orch report and orch predict.
    """
    from rich.table import Table as RichTable

    from .. import envs, execute, results
    from .. import netbench as nb
    from .. import site as sitemod
    from .. import sweep as sweepmod
    from ..modes.allreduce_bench.mode import MODE, parse_sizes

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
    options = {"reps": (str(reps),)}
    if sizes is not None:
        options["sizes"] = (":".join(str(n) for n in parse_sizes(sizes, "--sizes")),)
    if backend is not None:
        options["backend"] = (backend,)
    spec = sweepmod.SweepSpec(nodes=(nodes,), modes=(MODE.name,), models=(model,),
                              dataset=dataset, partitions=(part.name,),
                              tasks_per_node=tasks_per_node, iters=iters, warmup=warmup,
                              time_limit_min=time_limit, options=options)
    runs = sweepmod.expand(spec, site_obj)
    out_dir = (out or Path("runs") / site_obj.name).resolve()
    envs.check(site_obj, {r.framework for r in runs})
    prepared = execute.prepare(runs, site_obj, out_dir)
    run = runs[0]
    verb = "already measured" if prepared[0].action == "skip" else "submitting"
    err_console.print(f"netbench {site_obj.name}/{part.name}: {run.ranks} ranks on {nodes} "
                      f"node(s), {verb}: {out_dir / run.run_id}", highlight=False)
    execute.execute(prepared, site_obj, wait=True, on_event=_print_event)
    results.merge(out_dir)
    result = nb.fit_run(out_dir / run.run_id)
    path = None
    if save:
        path = nb.save(result, nb.store_path(site_obj.name, part.name, store))
    if format == "json":
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        table = RichTable(box=None, header_style="bold",
                          title=f"all-reduce over {result.workers} ranks ({result.backend}), "
                          f"median of {result.iterations} iterations, slowest rank",
                          title_justify="left")
        for c in ("bytes", "measured µs", "algbw GB/s", "busbw GB/s", "model µs",
                  "model / measured"):
            table.add_column(c, justify="right")
        for size, t, m, bus in zip(result.sizes, result.seconds, result.model_seconds(),
                                   result.bus_bandwidths(), strict=True):
            table.add_row(f"{size:,}", f"{t * 1e6:,.1f}", f"{nb.algbw(size, t) / 1e9:.3f}",
                          f"{bus / 1e9:.3f}", f"{m * 1e6:,.1f}", f"{m / t:.2f}")
        out_console.print(table)
        out_console.print(f"{site_obj.name}/{part.name}: {result.describe()}", markup=False,
                          highlight=False)
    if path is not None:
        err_console.print(f"stored {path}", highlight=False, markup=False)


def _print_event(run, record) -> None:
    job = f" job {record.job_id}" if record.job_id else ""
    reason = f": {record.reason.splitlines()[0]}" if record.reason else ""
    err_console.print(f"  {run.run_id}{job} {record.state}{reason}", highlight=False,
                      markup=False)


# --- orch export ---------------------------------------------------------------------------


def export_cmd(
    directory: Annotated[Path, typer.Argument(metavar="SWEEP", help="Sweep directory (or its "
                                              "results/).")],
    format: Annotated[str, typer.Option("--format", "-f", help="parquet, csv or json.")]
    = "parquet",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="File to write; default "
                                             "standard output (csv, json).")] = None,
    table: Annotated[str, typer.Option(help="runs (one row per run) or iterations (one row "
                                       "per run, rank and iteration).")] = "runs",
    old_output: Annotated[Path | None, typer.Option("--output", hidden=True)] = None,
) -> None:
    """Write the result set (runs or iterations) as Parquet, CSV or JSON.

    Parquet opens in pandas (pd.read_parquet) and DuckDB (SELECT * FROM 'FILE').
    """
    import pandas as pd

    output = renamed(out, old_output, "--out", "--output")
    if format not in ("parquet", "csv", "json"):
        raise UserError(f"--format {format}: valid: parquet, csv, json")
    if table not in ("runs", "iterations"):
        raise UserError(f"--table {table}: valid: runs, iterations")
    if format == "parquet" and output is None:
        raise UserError("--format parquet: give --out FILE (Parquet is binary)")
    load_result_set(directory)  # merges a sweep directory, checks everything is there
    d = directory.resolve()
    res = d / "results" if (d / "results" / "runs.parquet").is_file() else d
    src = res / f"{table}.parquet"
    if not src.is_file():
        raise UserError(f"{directory}: no {src.name} in the result set")
    if format == "parquet":
        output.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, output)
    else:
        df = pd.read_parquet(src)
        target = output if output is not None else sys.stdout
        if format == "csv":
            df.to_csv(target, index=False)
        else:
            text = df.to_json(orient="records", indent=2, date_format="iso") + "\n"
            if output is None:
                sys.stdout.write(text)
            else:
                output.write_text(text)
    if output is not None:
        err_console.print(f"wrote {output} ({table}, {format})", highlight=False, markup=False)
