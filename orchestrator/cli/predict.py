"""``orch predict``: speedup and iteration time at given worker counts, from the performance
model (orchestrator.report.whatif decides the inputs; this module parses and prints)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, out_console
from .resultset import load_result_set


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
    from ..report import whatif
    _check_choices(results_dir, breakdown, trace, format, prefetch, overlap)
    # Ask's fields are named as this command's options (the others are not Ask's: ignored).
    ask = whatif.Ask.model_validate({**locals(), "prefetch": prefetch == "yes"})
    two = whatif.TwoLevel(tasks_per_node, gpus_per_node, pattern, servers, intra_bandwidth,
                          intra_latency)
    _show(_forecast(ask, two, results_dir, breakdown, trace), format)


def _check_choices(results_dir: Path | None, breakdown: Path | None, trace: Path | None,
                   format: str, prefetch: str, overlap: str | None) -> None:
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


def _show(forecast, format: str) -> None:
    """Notes and the header on stderr; the rows as JSON, or as a table."""
    for note in forecast.notes:
        err_console.print(note, markup=False, highlight=False)
    if format == "json":
        sys.stdout.write(json.dumps(forecast.rows, indent=2) + "\n")
        return
    err_console.print(forecast.header, markup=False, highlight=False)
    _print_predictions(forecast.rows, forecast.with_measured)
    flagged = sorted({f for r in forecast.rows for f in r.get("flags") or []})
    for flag in flagged:
        err_console.print(f"flag: {flag}", markup=False, highlight=False)


def _forecast(ask, two, results_dir: Path | None, breakdown: Path | None, trace: Path | None):
    """The model's forecast for the one input given: two-level when its options (or a result
    set's pre-flight) ask for it."""
    from ..report import whatif

    if two.wanted(results_dir):
        if trace is not None:
            return whatif.two_level_trace(two, ask, trace)
        if breakdown is not None:
            return whatif.two_level_breakdown(two, ask, breakdown)
        runs, iters, sweep = load_result_set(results_dir)
        return whatif.two_level_results(two, ask, runs, sweep, results_dir, iters)
    if results_dir is not None:
        runs, iters, sweep = load_result_set(results_dir)
        return whatif.from_results(ask, runs, sweep, results_dir, iters)
    if breakdown is not None:
        return whatif.from_breakdown(ask, breakdown)
    return whatif.from_trace(ask, trace)


def _print_predictions(rows: list[dict], with_measured: bool) -> None:
    from rich.table import Table as RichTable

    from ..report import fmt_num, ms

    table = RichTable(box=None, header_style="bold")
    cols = ["workers", "t_iter ms", "speedup", "efficiency", "comm exposed ms",
            "comm total ms"]
    level = next((r["level"] for r in rows if r.get("level")), None)
    if level is not None:
        cols.insert(2, f"{level:.0%} interval ms")
    if with_measured:
        cols += ["measured speedup", "residual", "measured t_iter ms"]
    for c in cols:
        table.add_column(c, justify="right")
    for r in rows:
        cells = [str(r["workers"]), ms(r["t_iter"], 3), fmt_num(r["speedup"], ".2f"),
                 fmt_num(r["efficiency"], ".0%"), ms(r["t_comm_exposed"], 3),
                 ms(r["t_comm_total"], 3)]
        if level is not None:
            cells.insert(2, f"{ms(r.get('t_iter_low'), 3)}-{ms(r.get('t_iter_high'), 3)}"
                         if r.get("t_iter_low") is not None else "-")
        if with_measured:
            cells += [fmt_num(r.get("measured_speedup"), ".2f"),
                      fmt_num(r.get("residual_speedup"), "+.2f"), ms(r.get("measured_t_iter"), 3)]
        table.add_row(*cells)
    out_console.print(table)
