"""``orch trace``: a run's layer-wise trace in the source paper's format."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, find_run, renamed


def trace(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="Run id (from orch "
                                          "results).")],
    directory: Annotated[Path | None, typer.Argument(
        metavar="SWEEP", help="Its sweep directory; default: search runs/*/.",
        show_default=False)] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Copy the trace CSV here.")]
    = None,
    old_dir: Annotated[Path | None, typer.Option("--dir", hidden=True)] = None,
    old_output: Annotated[Path | None, typer.Option("--output", hidden=True)] = None,
) -> None:
    """A run's layer-wise trace (id, name, forward_us, backward_us, comm_us, size_bytes).

    Written by PyTorch runs swept with --option trace=yes; 'orch predict --trace' reads it.
    """
    output = renamed(out, old_output, "--out", "--output")
    rdir = find_run("trace", run_id, directory, old_dir)
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
