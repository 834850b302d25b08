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

    from .. import results, rundir
    from ..results.columns import read_runs

    if not directory.is_dir():
        raise UserError(f"{directory}: no such directory; give a sweep directory (orch sweep "
                        "--out) or its results/ directory")
    directory = directory.resolve()
    sweep = None
    if rundir.run_dirs(directory):
        results.recheck(directory)  # the run records first: merge only reads
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
    runs = read_runs(res / "runs.parquet")
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


def load_device_samples(directory: Path):
    """``devices.parquet`` of a result set (a sweep directory or its results/): the ranks'
    device samples over time; None where it has none (a result set older than the sampler)."""
    import pandas as pd

    for path in (directory / "results" / "devices.parquet", directory / "devices.parquet"):
        if path.is_file():
            return pd.read_parquet(path)
    return None


def load_scorecard(directory: Path, sweep: Path | None, runs):
    """The scorecard of the predictions a sweep stated before its runs: scored from the sweep
    directory (and kept as results/predictions.parquet), or read from a result set's
    predictions.parquet; None when the sweep stated none."""
    import pandas as pd

    from ..model import ledger

    if sweep is not None:
        return ledger.scorecard_of_sweep(sweep, runs)
    d = directory.resolve()
    for path in (d / "results" / ledger.PARQUET, d / ledger.PARQUET):
        if path.is_file():
            return pd.read_parquet(path)
    return None
