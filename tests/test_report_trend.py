"""The report's history part (orchestrator/report/trend.py): the trend of each configuration
over a history's recorded sweeps, with its reference band, and the comparison with the
previous recorded sweep; on synthetic result sets (tests/test_history.py's)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.history import references, store
from orchestrator.report import trend

from .test_history import table

DAY = 86400.0
# orch report with a history, from the site config, and references: tests/test_history.py's
# test_gather_records_the_site_history_once_and_rerun_tests_the_spread (a real sweep).
REFS = """\
site: local
partitions:
  local:
    - match: {mode: torch-ddp, nodes: 2}
      metrics:
        samples_per_s: {value: 1500, lower: 0.2, upper: 0.3, unit: samples/s}
"""


def history(root: Path, days: list[float], scale: dict | None = None) -> None:
    """A history of one recorded sweep of one run per day (measured that many days ago)."""
    for i, day in enumerate(days):
        t = table(100 + i, seed_id=100 + i, scale=scale if i == len(days) - 1 else None)
        store.add(root, t.assign(commit="abc", dirty=False, image_digest="",
                                 measured_at=1.7e9 - day * DAY), Path(f"/sweeps/{i}"))


def view(root: Path, refs: references.References | None = None) -> trend.History:
    samples, used, _ = store.select(root)
    return trend.History(samples, used, measured_at=1.7e9, sweep="/sweeps/this",
                         references=refs)


def test_the_previous_sweep_is_the_latest_measured_before(tmp_path):
    history(tmp_path, [3, 2, 1], scale={"t_comm": 3.0})  # the last one had a slow fabric
    tables, figures, _ = trend.section(view(tmp_path), table(7), figures=False)
    (t,) = tables
    (row,) = t.rows
    assert row[0] == "torch-ddp lenet5 local 2x1 b32 backend=gloo"
    entries = store.entries(tmp_path)[0]
    assert row[1].startswith(entries[2].id)  # the latest before this sweep
    assert row[2].startswith("faster ")  # this sweep against the slow one
    assert "exposed communication" in row[4] and "fabric" in row[4]
    assert figures == {}


def test_a_sweep_with_no_earlier_recorded_sweep_says_so(tmp_path):
    history(tmp_path, [1])
    later = view(tmp_path)
    earlier = trend.History(later.samples, later.entries, measured_at=1.7e9 - 5 * DAY)
    (t,), _, _ = trend.section(earlier, table(7), figures=False)
    assert t.rows[0][2] == "no recorded sweep measured before it"


def test_trend_points_and_the_reference_band(tmp_path):
    history(tmp_path, [3, 2, 1])
    refs_file = tmp_path / "refs.yaml"
    refs_file.write_text(REFS)
    v = view(tmp_path, references.load(refs_file))
    series = trend.trend_series(v, table(7), v.measured_at)
    ((at, values, band),) = series.values()
    assert at == [1.7e9 - 3 * DAY, 1.7e9 - 2 * DAY, 1.7e9 - DAY, 1.7e9]  # this sweep last
    assert len(values) == 4 and all(v > 0 for v in values)
    assert band == (1500 * 0.8, 1500 * 1.3)
    png = trend.figure(series)
    assert png is not None and png.startswith(b"\x89PNG")


def test_no_band_where_no_reference_applies(tmp_path):
    refs = references.References.model_validate(
        {"site": "local", "partitions": {"local": [{"match": {"nodes": 4}, "metrics": {
            "samples_per_s": {"value": 1, "lower": 0, "upper": 0, "unit": "samples/s"}}}]}})
    key = {"site": "local", "partition": "local", "mode": "torch-ddp", "nodes": 2,
           "options": "{}"}
    assert references.band(refs, key, "samples_per_s") is None
    assert references.band(refs, {**key, "nodes": 4}, "samples_per_s") == (1.0, 1.0)
    assert references.band(refs, {**key, "nodes": 4}, "t_iter") is None
