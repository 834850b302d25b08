"""``orch export``: a result set (runs or iterations) as Parquet, CSV or JSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, renamed
from .resultset import load_result_set


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

    Parquet opens in pandas (pd.read_parquet) and DuckDB (SELECT * FROM 'FILE'); the
    iterations, a file per run in the result set, become one file.
    """
    from .. import files
    from ..results import resultset

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
    found = resultset.table_files(src)
    if not found:
        raise UserError(f"{directory}: no {src.name} in the result set")
    if format == "parquet":
        output.parent.mkdir(parents=True, exist_ok=True)
        files.replace_with(output, lambda tmp: _one_file(found, tmp))
    else:
        df = resultset.read_table(src)
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


def _one_file(found: list[Path], target: Path) -> None:
    """The Parquet files of a table (a file per run, or one) as one file, a run at a time."""
    import pyarrow.parquet as pq

    with pq.ParquetWriter(target, pq.read_schema(found[0])) as writer:
        for path in found:
            writer.write_table(pq.read_table(path))
