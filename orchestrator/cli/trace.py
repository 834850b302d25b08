"""``orch trace``: a run's layer-wise trace in the source paper's format."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console


def trace(
    run_id: Annotated[str, typer.Argument(help="Run id (from orch results).")],
    dir: Annotated[Path | None, typer.Option("--dir", help="Its sweep directory (default: "
                                             "search runs/*).")] = None,
    output: Annotated[Path | None, typer.Option(help="Copy the trace CSV here.")] = None,
) -> None:
    """A run's layer-wise trace (id, name, forward_us, backward_us, comm_us, size_bytes).

    Written by PyTorch runs swept with --option trace=yes; 'orch predict --trace' reads it.
    """
    from .. import rundir

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
