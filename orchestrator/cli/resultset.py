"""Reading a result set for ``orch report``, ``orch predict`` and ``orch export``: a sweep
directory (merged first, so nothing is stale) or its ``results/`` directory, with its epochs
and the scorecard of the predictions the sweep stated."""

from __future__ import annotations

from pathlib import Path

from ..errors import UserError


def load_result_set(directory: Path):
    """(runs, iterations, sweep dir or None) of a sweep directory or a results/ directory.

    A sweep directory is merged first (like ``orch results``), so the report is never stale;
    a directory that only holds ``results/*.parquet`` (or the Parquet files themselves) is read
    as it is.
    """
    import pandas as pd

    from .. import results
    from ..results.columns import read_runs
    from ..runs import rundir

    if not directory.is_dir():
        raise UserError(f"{directory}: no such directory; give a sweep directory (orch sweep "
                        "--out) or its results/ directory")
    directory = directory.resolve()
    sweep = None
    if rundir.run_dirs(directory):
        keys = results.recheck(directory)  # the run records first: merge only reads
        results.merge(directory, keys)
        sweep = directory
        res = directory / "results"
    elif (directory / "results" / "runs.parquet").is_file():
        res = directory / "results"
    elif (directory / "runs.parquet").is_file():
        res = directory
    else:
        raise UserError(f"{directory}: not a sweep directory (no <run-id>/run.json) and no "
                        "results/runs.parquet; run orch sweep first")
    runs = _table(res / "runs.parquet", RUN_COLUMNS, sweep, read=read_runs)
    iters = _table(res / "iterations.parquet", ITER_COLUMNS, sweep,
                   read=results.resultset.read_table)
    if iters is None:
        iters = pd.DataFrame(columns=["run_id", "rank", "host", "iter", "warmup_iter", "t_iter"])
    if runs.empty:
        raise UserError(f"{directory}: the result set has no runs")
    return runs, iters, sweep


# The columns every command that reads a result set relies on: a file without them was not
# written by an orch this one reads (an older or newer format, or no result set at all).
RUN_COLUMNS = ("run_id", "state", "mode", "model", "nodes", "samples_per_s")
ITER_COLUMNS = ("run_id", "rank", "iter", "warmup_iter", "t_iter")


def _table(path: Path, columns: tuple[str, ...], sweep: Path | None, read=None):
    """A result set's Parquet table (``read``: its reader, pd.read_parquet by default; None
    where the reader finds none), or one line saying what to run where it cannot be read as
    this orch's: merged again from its sweep directory by ``orch gather``."""
    import pandas as pd
    import pyarrow as pa

    fix = (f"run 'orch gather {sweep}' to merge it again" if sweep is not None else
           "run 'orch gather SWEEP' on its sweep directory to merge it again with this orch")
    try:
        table = (read or pd.read_parquet)(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise UserError(f"{path}: not a result set this orch can read ({first}); {fix}") from None
    if table is None:
        return None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise UserError(f"{path}: written by another version of orch (no column "
                        f"{', '.join(missing)}); {fix}")
    return table


def load_epochs(directory: Path):
    """``epochs.parquet`` of a result set (a sweep directory or its results/), if it has one:
    the sweep had runs with --epochs."""
    return _per_run_table(directory, "epochs.parquet")


def load_device_samples(directory: Path):
    """``devices.parquet`` of a result set (a sweep directory or its results/): the ranks'
    device samples over time; None where it has none (a result set older than the sampler)."""
    return _per_run_table(directory, "devices.parquet")


def _per_run_table(directory: Path, name: str):
    """A per-run table of a result set (a sweep directory or its results/): a directory of a
    file per run, or an older orch's one file; None where it has none."""
    from ..results import resultset

    for path in (directory / "results" / name, directory / name):
        frame = resultset.read_table(path)
        if frame is not None:
            return frame
    return None


def load_scorecard(directory: Path, sweep: Path | None, runs):
    """The scorecard of the predictions a sweep stated before its runs: scored from the sweep
    directory (and kept as results/predictions.parquet), or read from a result set's
    predictions.parquet; None when the sweep stated none."""
    import pandas as pd

    from ..report import scorecard

    if sweep is not None:
        return scorecard.scorecard_of_sweep(sweep, runs)
    d = directory.resolve()
    for path in (d / "results" / scorecard.PARQUET, d / scorecard.PARQUET):
        if path.is_file():
            return pd.read_parquet(path)
    return None
