"""The fast merge on logs with two windows (native, then breakdown; protocol.py) and bad lines.

The fast path (pyarrow's CSV reader over the raw iteration lines of many logs) must give the
result set of the exact row-by-row path (read_rank_log + iteration_rows), with the ``window``
column: native rows without phases (null), breakdown rows with them; a malformed line, in either
window, is a problem of that log (the slow path reads it), never a crash or a wrong row.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from orchestrator import protocol, results
from orchestrator.results import tables

from .test_report import (
    FOOTER,
    check_merge,
    dumps,
    header,
    iteration,
    iterations_table,
    make_run,
    slow_result_set,
)

WARMUP = 2


def native(it: int, rng, warmup: bool) -> dict:
    """A native-window record as the harness writes it: no phase fields."""
    return {"type": "iter", "iter": it, "window": "native", "warmup": warmup,
            "t_start": 1.7e9 + it * 0.01 + rng.random() * 1e-3, "t_iter": rng.random() * 1e-2,
            "samples": 8}


def breakdown(it: int, rng, warmup: bool) -> dict:
    rec = iteration(it, rng)
    rec = {"type": "iter", "iter": it, "window": "breakdown", **{
        k: v for k, v in rec.items() if k not in ("type", "iter")}}
    rec["warmup"] = warmup
    return rec


def two_windows(rank: int, rng, n: int = 6) -> list[str]:
    """A harness log: header, n native records, n breakdown records, footer."""
    lines = [header(rank)]
    lines += [dumps(native(i, rng, i < WARMUP)) for i in range(n)]
    lines += [dumps(breakdown(n + i, rng, i < WARMUP)) for i in range(n)]
    return [*lines, FOOTER]


def write(path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")


def sweep_of_two_windows(tmp_path, rng, runs=(1, 2, 4)):
    out = tmp_path / "sweep"
    rdirs = []
    for nodes in runs:
        _, rdir = make_run(out, nodes=nodes, iters=4, warmup=WARMUP)
        for rank in range(nodes):
            write(rdir / "ranks" / f"rank-{rank}.jsonl", two_windows(rank, rng))
        rdirs.append(rdir)
    return out, rdirs


def test_two_windows_merge_exactly_with_a_window_column(tmp_path):
    rng = np.random.default_rng(11)
    out, _ = sweep_of_two_windows(tmp_path, rng)
    # an older log without windows (all breakdown) and one of a native window only
    _, rdir = make_run(out, nodes=2, iters=4, warmup=WARMUP, repeat=1)
    write(rdir / "ranks" / "rank-0.jsonl",
          [header(0), *(dumps(iteration(i, rng, warmup=WARMUP)) for i in range(6)), FOOTER])
    write(rdir / "ranks" / "rank-1.jsonl",
          [header(1), *(dumps(native(i, rng, i < WARMUP)) for i in range(6)), FOOTER])
    runs, fast = check_merge(out)
    rows = fast.to_pandas()
    assert len(rows) == (1 + 2 + 4) * 12 + 6 + 6
    assert set(rows["window"]) == {"native", "breakdown"}
    nat = rows[rows["window"] == "native"]
    brk = rows[rows["window"] == "breakdown"]
    assert len(nat) == 7 * 6 + 6 and len(brk) == 7 * 6 + 6
    for p in protocol.PHASES:  # native rows: no phases (null), breakdown rows: measured
        assert nat[p].isna().all() and brk[p].notna().all(), p
    assert nat["t_comm_total"].isna().all()
    # in line order within each log: the native iterations come first
    first = rows[(rows["run_id"] == runs["run_id"].iloc[0]) & (rows["rank"] == 0)]
    assert first["iter"].tolist() == list(range(12))
    assert first["window"].tolist() == ["native"] * 6 + ["breakdown"] * 6


BAD_LINES = {
    "torn": '{"type":"iter","iter":3,"window":"nat',
    "garbage": "\x00\x01 not json at all",
    "unknown window": '{"type":"iter","iter":3,"window":"other","warmup":false,'
                      '"t_start":1.7e9,"t_iter":0.01,"samples":8}',
    "string number": '{"type":"iter","iter":3,"window":"native","warmup":false,'
                     '"t_start":1.7e9,"t_iter":"0.01","samples":8}',
    "null iter": '{"type":"iter","iter":null,"window":"native","warmup":false,'
                 '"t_start":1.7e9,"t_iter":0.01,"samples":8}',
    "float iter": '{"type":"iter","iter":3.0,"window":"native","warmup":false,'
                  '"t_start":1.7e9,"t_iter":0.01,"samples":8}',
    "a phase in native": '{"type":"iter","iter":3,"window":"native","warmup":false,'
                         '"t_start":1.7e9,"t_iter":0.01,"samples":8,"t_f":0.004}',
    "null phase": None,  # built below: a breakdown record with "t_b": null
    "other record": '{"type":"footer","status":"ok"}',
    "blank": "",
    "spaces": "   ",
    "warmup 1": '{"type":"iter","iter":3,"window":"native","warmup":1,'
                '"t_start":1.7e9,"t_iter":0.01,"samples":8}',
    "NaN": '{"type":"iter","iter":3,"window":"native","warmup":false,'
           '"t_start":1.7e9,"t_iter":NaN,"samples":8}',
    "two on one line": None,  # built below: two records joined without a newline
    "extra key, text": None,  # built below: an unknown key with a string value
}


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")  # the NaN line's metrics
@pytest.mark.parametrize("where", ["native", "breakdown"])
def test_a_bad_line_in_either_window_merges_like_the_slow_path(tmp_path, monkeypatch, where):
    """One odd line per case, in the native or the breakdown window of one log of a sweep:
    the result set equals the slow path's, and only that log is read the slow way (where the
    line is not one the fast path can take exactly)."""
    rng = np.random.default_rng(12)
    out, rdirs = sweep_of_two_windows(tmp_path, rng)
    log = rdirs[2] / "ranks" / "rank-1.jsonl"
    good = log.read_text().splitlines()
    at = 3 if where == "native" else 9  # a line inside that window
    slow_reads = []
    real = tables.read_rank_log
    monkeypatch.setattr(tables, "read_rank_log", lambda p: (slow_reads.append(p), real(p))[1])
    for name, bad in BAD_LINES.items():
        rec = json.loads(good[at])
        if name == "null phase":
            rec["t_b"] = None  # a phase key in native records too: a shape of its own
            bad = dumps(rec)
        elif name == "two on one line":
            bad = good[at] + good[at + 1]
        elif name == "extra key, text":
            rec["note"] = "a:b,c"
            bad = dumps(rec)
        write(log, [*good[:at], bad, *good[at + 1:]])
        slow_reads.clear()
        if name == "NaN":  # a number Python's json reads; NaN != NaN for Table.equals
            results.merge(out)
            fast = iterations_table(out)
            pd.testing.assert_frame_equal(fast.to_pandas(), slow_result_set(out)[0].to_pandas())
            assert np.isnan(fast.column("t_iter").to_numpy()).sum() == 1
        else:
            _, fast = check_merge(out)
        # Lines the fast path takes as they are (a blank line, a number Python's json reads,
        # an explicit null phase among phases); any other makes only this log go slow.
        fast_ok = {"blank", "NaN" if where == "native" else "null phase"}
        assert [p.name for p in slow_reads] == ([] if name in fast_ok else [log.name]), name
        assert fast.num_rows >= (1 + 2 + 4) * 12 - 1, name


def test_fast_path_reads_harness_logs_without_the_slow_path(tmp_path, monkeypatch):
    """Logs as the harness writes them never go through the row-by-row parser (the
    reference in check_merge reads them through protocol, not through tables)."""
    out, _ = sweep_of_two_windows(tmp_path, np.random.default_rng(13))
    monkeypatch.setattr(tables, "read_rank_log", lambda p: pytest.fail(f"slow path: {p}"))
    _, fast = check_merge(out)
    assert fast.num_rows == 7 * 12


def test_run_metrics_are_pandas_means_and_stds_bit_for_bit(tmp_path):
    """analyze computes the phase and t_iter statistics with numpy (speed): each must be the
    figure pandas' Series.mean / Series.std give on the run's measured breakdown rows, with a
    null phase (skipped, as pandas skips NaN) among them."""
    rng = np.random.default_rng(14)
    out, rdirs = sweep_of_two_windows(tmp_path, rng)
    log = rdirs[2] / "ranks" / "rank-1.jsonl"
    lines = log.read_text().splitlines()
    rec = json.loads(lines[10])  # a measured breakdown line
    rec["t_b"] = None
    write(log, [*lines[:10], dumps(rec), *lines[11:]])
    runs = results.merge(out)
    rows = iterations_table(out).to_pandas()
    for _, run in runs.iterrows():
        m = rows[(rows["run_id"] == run["run_id"]) & (rows["window"] == "breakdown")
                 & ~rows["warmup_iter"]]
        for name in ("t_iter", *protocol.PHASES):
            assert run[name] == m[name].mean(), name
            assert run[f"{name}_std"] == m[name].std(ddof=1), name
    assert rows["t_b"].isna().sum() == 1 + rows["window"].eq("native").sum()


def test_a_line_over_the_bound_sends_its_log_the_slow_way(tmp_path, monkeypatch):
    """An iteration line longer than protocol.MAX_LINE_BYTES that the CSV reader splits
    (one huge number): the fast path leaves its log to the slow path, which reports the line
    as damaged and reads the rest; the result set equals the slow path's."""
    rng = np.random.default_rng(14)
    out, rdirs = sweep_of_two_windows(tmp_path, rng)
    log = rdirs[2] / "ranks" / "rank-1.jsonl"
    good = log.read_text().splitlines()
    rec = json.loads(good[9])
    huge = dumps(rec).replace(f'"t_f":{json.dumps(rec["t_f"])}',
                              '"t_f":0.' + "1" * (protocol.MAX_LINE_BYTES + 10))
    assert len(huge) > protocol.MAX_LINE_BYTES and huge != dumps(rec)
    write(log, [*good[:9], huge, *good[10:]])
    slow_reads = []
    real = tables.read_rank_log
    monkeypatch.setattr(tables, "read_rank_log", lambda p: (slow_reads.append(p), real(p))[1])
    check_merge(out)
    assert [p.name for p in slow_reads] == [log.name]
    assert protocol.read_rank_log(log).problems == [f"{log.name}:10: a line longer than 1 MiB: "
                                                    "a damaged log"]
