"""The result set's columns are the declared ones (orchestrator.results.columns): a merge of
real recorded runs (the H200 runs of tests/fixtures, with device samples) writes exactly the
declared columns, in their order and types, a column no run has a value for included; and
every column says what it means."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orchestrator.results import columns, convergence
from orchestrator.results.resultset import merge, table_files

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "gpu-h200-metrics"


def _kind(arrow_type) -> str:
    """The declared type an Arrow type is (string and large_string are both string)."""
    name = str(arrow_type)
    return {"large_string": "string", "string": "string", "bool": "bool"}.get(name, name)


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> Path:
    sweep = tmp_path_factory.mktemp("columns") / "sweep"
    shutil.copytree(FIXTURE, sweep)
    merge(sweep)
    return sweep / "results"


def test_runs_parquet_holds_the_declared_columns_in_their_types(merged):
    schema = pq.read_schema(merged / "runs.parquet")
    written = [(f.name, _kind(f.type)) for f in schema if not f.name.startswith("__")]
    assert written == [(c.name, c.type) for c in columns.RUNS]
    # columns no run of these has a value for are typed all the same
    assert dict(written)["epochs"] == "int64" and dict(written)["tta_s"] == "double"


def test_iterations_and_device_samples_hold_the_declared_columns(merged):
    for name, declared in (("iterations.parquet", columns.ITERATIONS),
                           ("devices.parquet", columns.DEVICE_SAMPLES)):
        found = table_files(merged / name)  # a file per run, each of the declared schema
        assert found, name
        for path in found:
            schema = pq.read_schema(path)
            assert [(f.name, _kind(f.type)) for f in schema] == [(c.name, c.type)
                                                                 for c in declared], path


def test_epoch_columns_are_the_declared_ones():
    assert [c.name for c in columns.EPOCHS] == list(convergence.EPOCH_COLUMNS)


def test_every_column_has_a_type_and_a_meaning():
    for table in (columns.RUNS, columns.ITERATIONS, columns.EPOCHS, columns.DEVICE_SAMPLES):
        names = [c.name for c in table]
        assert len(names) == len(set(names))
        for c in table:
            assert c.type in columns.TYPES and len(c.means) > 10, c


def test_text_columns_read_back_with_none_for_missing(merged):
    runs = columns.read_runs(merged / "runs.parquet")
    assert runs["invariant_violations"].tolist() == [None] * len(runs)
    assert runs["epochs"].isna().all() and runs["state"].eq("COMPLETED").all()
