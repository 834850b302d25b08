"""``orch report``: a result set's tables on the terminal, its PNG figures, and a Markdown +
self-contained HTML report (the work is orchestrator.report's; this module parses, reads,
writes and prints)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, out_console
from .history import report_history
from .resultset import load_device_samples, load_epochs, load_result_set, load_scorecard


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
    history: Annotated[Path | None, typer.Option(
        "--history", help="A results history (orch history): each configuration's throughput "
        "over its recorded sweeps, and this sweep against the previous one; default: the "
        "history the site config names, if any.")] = None,
    references: Annotated[Path | None, typer.Option(
        "--references", help="A site's references.yaml: the band it allows, on the trend "
        "plot.")] = None,
) -> None:
    """Tables on the terminal, PNG plots, and a Markdown + self-contained HTML report.

    Throughput, speedup and efficiency per node count; phase breakdown; exposed vs total
    communication; per-rank spread and stragglers; and, for every run, the speedup the
    performance model predicts from the 1-node breakdown, next to the measured one.
    """
    from .. import report as rep
    from ..execute.network import comm_lookup

    runs, iters, sweep = load_result_set(directory)
    if netbench_file is not None and not netbench_file.exists():
        raise UserError(f"--netbench {netbench_file}: no such file or directory")
    title = f"orch report: {sweep or directory.resolve()}"
    report = rep.build(runs, iters, comm_lookup(sweep, netbench_file), title=title,
                       figures=plots, scorecard=load_scorecard(directory, sweep, runs),
                       epochs=load_epochs(directory),
                       device_samples=load_device_samples(directory),
                       history=report_history(history, references, sweep))
    for line in report.summary:
        out_console.print(line, markup=False, highlight=False)
    if report.summary:
        out_console.print()
    if report.overview is not None:
        print_table(report.overview)
    if report.flagged:
        out_console.print("Flagged predictions (each reason once, with its runs):",
                          style="bold", markup=False, highlight=False)
        for reason, runs in report.flagged:
            out_console.print(f"  {reason}: {', '.join(runs)}", markup=False, highlight=False)
        out_console.print()
    for line in report.notes:
        out_console.print(line, markup=False, highlight=False)
    if report.notes:
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
