"""Incremental gather: results/.cache/ lets a re-merge read only the files of runs that changed
and write only their files, and the result set stays exactly that of a merge from scratch
(tests/test_report.check_merge, and a copy of the sweep merged without a cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from orchestrator import protocol, results
from orchestrator.results import cache, resultset
from orchestrator.runs import rundir

from .test_report import FOOTER, check_merge, dumps, header, iteration, iterations_table, make_run

ROOT = Path(__file__).resolve().parent.parent
ONE_FILE = Path(__file__).parent / "fixtures" / "results-one-file" / "sweep"


def _sweep(tmp_path):
    rng = np.random.default_rng(7)
    out = tmp_path / "sweep"
    rdirs = []
    for nodes in (1, 2, 4):
        _, rdir = make_run(out, nodes=nodes, iters=6, warmup=2)
        for rank in range(nodes):
            lines = [header(rank)] + [dumps(iteration(i, rng, warmup=2)) for i in range(8)]
            (rdir / "ranks" / f"rank-{rank}.jsonl").write_text("\n".join([*lines, FOOTER]) + "\n")
        rdirs.append(rdir)
    _age_all(out)
    return out, rdirs


def _age(path, seconds=60):
    """A file written seconds ago (one written within RACY_S is never taken from the cache)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


def _age_all(out, seconds=60):
    """Every file of every run directory of ``out`` written seconds ago, as a finished run's."""
    for path in out.glob("*/**/*"):
        if path.is_file() and "results" not in path.relative_to(out).parts:
            _age(path, seconds)


class _Pinned:
    """The time module, with time_ns() pinned at ``ns``."""

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def time_ns(self) -> int:
        return self.ns

    def __getattr__(self, name: str):
        return getattr(time, name)


def _count_reads(monkeypatch):
    read = []
    real = protocol.read_rank_log

    def counting(path, raw_iters=False):
        if raw_iters:  # as the merge reads a log (the reference reads them exactly)
            read.append(path)
        return real(path, raw_iters)

    monkeypatch.setattr(protocol, "read_rank_log", counting)
    return read


def _written(out) -> dict[str, cache.Token]:
    """Every file of results/ but the cache, with its identity (a rewrite changes it)."""
    res = out / "results"
    return {str(p.relative_to(res)): cache.file_token(p) for p in res.rglob("*")
            if p.is_file() and ".cache" not in p.parts}


def _same_as_from_scratch(out, tmp_path, runs) -> None:
    """The result set of ``out`` is that of a copy of its run directories merged without a
    cache: the runs table frame for frame, every per-run table row for row."""
    fresh = tmp_path / "fresh"
    shutil.rmtree(fresh, ignore_errors=True)
    for rdir in rundir.run_dirs(out):
        shutil.copytree(rdir, fresh / rdir.name)
    scratch = results.merge(fresh)
    pd.testing.assert_frame_equal(runs, scratch)
    pd.testing.assert_frame_equal(pd.read_parquet(out / resultset.RUNS),
                                  pd.read_parquet(fresh / resultset.RUNS))
    for name in resultset.TABLES:
        mine = resultset.read_table(out / "results" / f"{name}.parquet")
        theirs = resultset.read_table(fresh / "results" / f"{name}.parquet")
        if theirs is None:
            assert mine is None, name
        else:
            pd.testing.assert_frame_equal(mine, theirs)


def _add_iteration(log, rng) -> None:
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines[:-1], dumps(iteration(8, rng, warmup=2)), lines[-1]]) + "\n")
    _age(log, 30)


def test_regather_reads_and_writes_only_the_changed_run(tmp_path, monkeypatch):
    out, rdirs = _sweep(tmp_path)
    read = _count_reads(monkeypatch)
    check_merge(out)
    assert len(read) == 1 + 2 + 4
    assert sorted(p.name for p in (out / results.CACHE_DIR).iterdir()) == sorted(
        f"{r.name}.json" for r in rdirs)
    assert sorted(p.name for p in (out / resultset.ITERATIONS).iterdir()) == sorted(
        f"{r.name}.parquet" for r in rdirs)
    first, before = iterations_table(out), _written(out)

    read.clear()
    runs, again = check_merge(out)  # nothing changed: no log read, no file written
    assert read == [] and again.equals(first) and _written(out) == before

    # the 2-node run gets one more iteration on rank 1: only its two logs are read, only its
    # file of iterations and runs.parquet are written
    _add_iteration(rdirs[1] / "ranks" / "rank-1.jsonl", np.random.default_rng(8))
    read.clear()
    runs, changed = check_merge(out)
    assert sorted(p.parent.parent.name for p in read) == [rdirs[1].name] * 2
    assert changed.num_rows == first.num_rows + 1
    now = _written(out)
    assert sorted(k for k in now if now[k] != before[k]) == [
        f"iterations.parquet/{rdirs[1].name}.parquet", "runs.parquet"]
    _same_as_from_scratch(out, tmp_path, runs)

    # a run removed: its file and its entry go too; a corrupt entry is just a miss
    shutil.rmtree(rdirs[0])
    (out / results.CACHE_DIR / f"{rdirs[2].name}.json").write_text("{not json")
    read.clear()
    runs, _ = check_merge(out)
    assert len(runs) == 2 and len(read) == 4  # only the 4-node run, whose entry was corrupt
    assert sorted(p.name for p in (out / results.CACHE_DIR).iterdir()) == sorted(
        f"{r.name}.json" for r in rdirs[1:])
    assert sorted(p.stem for p in (out / resultset.ITERATIONS).iterdir()) == sorted(
        r.name for r in rdirs[1:])


def test_a_rewritten_file_run_json_or_ledger_invalidates_that_run(tmp_path, monkeypatch):
    out, rdirs = _sweep(tmp_path)
    check_merge(out)
    read = _count_reads(monkeypatch)
    # a run's file of iterations rewritten by something else: its rows are not trusted
    mine = out / resultset.ITERATIONS / f"{rdirs[0].name}.parquet"
    mine.write_bytes(mine.read_bytes())
    check_merge(out)
    assert [p.parent.parent.name for p in read] == [rdirs[0].name]
    # a file of a run that has none (devices) appearing: that run is merged again, and the
    # file it should not have goes
    stray = out / "results" / "devices.parquet" / f"{rdirs[1].name}.parquet"
    stray.parent.mkdir(parents=True)
    shutil.copy(mine, stray)
    read.clear()
    check_merge(out)
    assert len(read) == 2 and not stray.exists()
    # run.json edited (same logs): that run is re-read
    run_json = rdirs[2] / "run.json"
    run_json.write_text(json.dumps(json.loads(run_json.read_text()), indent=1))
    _age(run_json)
    read.clear()
    check_merge(out)
    assert len(read) == 4
    # its ledger entry changed (logs the same): its row says so at once
    record = rundir.read_record(rdirs[2])
    rundir.write_record(rdirs[2], record.model_copy(update={"reason": "checked by hand"}))
    _age(rdirs[2] / protocol.JOB_FILE)
    read.clear()
    runs, _ = check_merge(out)
    assert len(read) == 4
    assert runs.set_index("run_id").loc[rdirs[2].name, "reason"] == "checked by hand"
    _same_as_from_scratch(out, tmp_path, runs)


def test_another_orch_or_an_entry_of_another_format_is_a_miss(tmp_path, monkeypatch):
    """An entry written by an older orch (version 2, plain dict) or one whose fields are not
    what they should be: that run's logs are read again, never a crash, and its entry is
    rewritten in this version's format. Another version of orch's code: every run."""
    out, rdirs = _sweep(tmp_path)
    check_merge(out)
    entries = out / results.CACHE_DIR
    old = json.loads((entries / f"{rdirs[1].name}.json").read_text())
    (entries / f"{rdirs[1].name}.json").write_text(json.dumps({**old, "version": 2}))
    (entries / f"{rdirs[2].name}.json").write_text(json.dumps({**old, "row": "many"}))
    read = _count_reads(monkeypatch)
    check_merge(out)
    assert sorted(p.parent.parent.name for p in read) == sorted(
        [rdirs[1].name] * 2 + [rdirs[2].name] * 4)
    for rdir in rdirs:
        entry = cache.CacheEntry.model_validate_json((entries / f"{rdir.name}.json").read_text())
        assert entry.version == cache.CACHE_VERSION
    monkeypatch.setattr(cache, "code_digest", lambda: "another-orch")
    read.clear()
    check_merge(out)
    assert len(read) == 7


def test_a_merge_in_many_batches_is_the_same(tmp_path, monkeypatch):
    """Runs parsed and written one batch at a time (here: one run per batch), and a re-merge
    of one of them: the result set of a merge in one go."""
    monkeypatch.setattr(resultset, "BATCH_BYTES", 1)
    out, rdirs = _sweep(tmp_path)
    check_merge(out)
    log = rdirs[0] / "ranks" / "rank-0.jsonl"
    log.write_text(log.read_text())  # rewritten: a new mtime, the same rows
    _age(log, 30)
    read = _count_reads(monkeypatch)
    runs, _ = check_merge(out)
    assert [p.parent.parent.name for p in read] == [rdirs[0].name]
    monkeypatch.setattr(resultset, "BATCH_BYTES", 64 << 20)
    _same_as_from_scratch(out, tmp_path, runs)


def test_a_log_written_just_now_is_read_again(tmp_path, monkeypatch):
    out, rdirs = _sweep(tmp_path)
    log = rdirs[0] / "ranks" / "rank-0.jsonl"
    log.touch()  # still being written, maybe
    # The cache's clock stays at that write: "just now" however long the merges take (a
    # loaded machine's first merge could look more than RACY_S after it and cache the log).
    monkeypatch.setattr(cache, "time", _Pinned(log.stat().st_mtime_ns))
    check_merge(out)
    read = _count_reads(monkeypatch)
    check_merge(out)
    assert len(read) == 1  # only the racy run; the others came from the cache


def test_odd_iteration_lines_still_merge_exactly(tmp_path):
    """A quoted number, a record of another type, another key, a null iter among the
    iteration lines: the fast paths refuse them and the merge is still the slow one's (the
    JSON fallback used to count a non-iter record as a row)."""
    out, rdirs = _sweep(tmp_path)
    log = rdirs[2] / "ranks" / "rank-3.jsonl"
    good = log.read_text()
    for bad in ('"t_f":"0.5"', '"type":"other"', '"t_x":0.5', '"iter":null'):
        lines = good.splitlines()
        rec = json.loads(lines[3])
        key, value = bad.split(":", 1)
        rec[json.loads(key)] = json.loads(value)
        if key == '"t_x"':
            del rec["t_f"]
        lines[3] = json.dumps(rec, separators=(",", ":"))
        log.write_text("\n".join(lines) + "\n")
        check_merge(out)


def test_a_recheck_reads_no_log_of_a_run_that_did_not_change(tmp_path, monkeypatch):
    """Finished runs' ledger entries hold their logs' digest; re-checking them reads every
    byte of every log, so a run whose files are as they were at its last check is not read."""
    out, rdirs = _sweep(tmp_path)
    for rdir in rdirs:
        record = rundir.read_record(rdir)
        rundir.write_record(rdir, record.model_copy(
            update={"logs_digest": rundir.logs_digest(rdir)}))
    _age_all(out)
    hashed = []
    real = rundir.logs_digest
    monkeypatch.setattr(rundir, "logs_digest", lambda rdir: (hashed.append(rdir.name),
                                                             real(rdir))[1])
    results.recheck(out)
    assert sorted(hashed) == sorted(r.name for r in rdirs)
    hashed.clear()
    results.recheck(out)
    assert hashed == []
    # a log truncated since: that run only is read again, and found changed
    log = rdirs[1] / "ranks" / "rank-0.jsonl"
    log.write_text(log.read_text()[:-200])
    _age(log, 30)
    results.recheck(out)
    assert hashed == [rdirs[1].name]
    record = rundir.read_record(rdirs[1])
    assert record.state == "FAILED" and "rank logs changed" in record.reason
    _age(rdirs[1] / protocol.JOB_FILE)  # rewritten just now: checked until it has been still
    hashed.clear()
    results.recheck(out)
    results.recheck(out)
    assert hashed == [rdirs[1].name]  # its new ledger entry checked once, then remembered


def test_pandas_and_duckdb_read_each_table_as_one(tmp_path):
    """What docs/reference/result-set.md tells users: ``pd.read_parquet`` of a per-run table's
    directory, DuckDB's ``'<directory>/*.parquet'``: every row of every run, once."""
    out, _ = _sweep(tmp_path)
    check_merge(out)
    directory = out / resultset.ITERATIONS
    mine = iterations_table(out).to_pandas()
    frame = pd.read_parquet(directory)
    pd.testing.assert_frame_equal(frame, mine)
    rows = duckdb.sql(f"SELECT run_id, rank, iter, t_iter FROM '{directory}/*.parquet' "
                      "ORDER BY run_id, rank, iter").df()
    expected = mine[["run_id", "rank", "iter", "t_iter"]].sort_values(
        ["run_id", "rank", "iter"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(rows, expected, check_dtype=False)
    assert len(frame) == (1 + 2 + 4) * 8


def test_a_result_set_of_one_file_per_table_is_read_and_rebuilt(tmp_path, monkeypatch):
    """A sweep merged by orch before the result set had a file per run (each table one file,
    cache entries of version 5; tests/fixtures/results-one-file/make.py): read as it is where
    only its results are there, and rebuilt from its run directories by the next merge, with
    the same rows; the one-file tables are gone once their directories are complete."""
    from orchestrator.cli.resultset import load_device_samples, load_epochs, load_result_set

    old = ONE_FILE / "results"
    only_results = tmp_path / "results-only"
    shutil.copytree(old, only_results)
    runs, iters, sweep = load_result_set(only_results)
    assert sweep is None and len(runs) == 3
    pd.testing.assert_frame_equal(iters, pd.read_parquet(old / "iterations.parquet"))
    assert len(load_epochs(only_results)) == 2 and len(load_device_samples(only_results)) == 15

    out = tmp_path / "sweep"
    shutil.copytree(ONE_FILE, out)
    _age_all(out)
    read = _count_reads(monkeypatch)
    runs = results.merge(out)
    assert len(read) == 1 + 2 + 1  # every log: no entry of the older orch is taken
    for name in resultset.TABLES:
        assert (out / "results" / f"{name}.parquet").is_dir(), name
        before = pd.read_parquet(old / f"{name}.parquet")
        rebuilt = resultset.read_table(out / "results" / f"{name}.parquet")
        # every column it had, the same rows and values (a column this orch adds may come)
        pd.testing.assert_frame_equal(rebuilt[list(before.columns)], before)
    before, now = pd.read_parquet(old / "runs.parquet"), pd.read_parquet(out / resultset.RUNS)
    for column in before.columns:  # every column it had, the same (new ones may come)
        # an all-null text column the older orch wrote as object is now typed string
        if before[column].isna().all():
            assert now[column].isna().all(), column
        else:
            pd.testing.assert_series_equal(now[column], before[column])
    assert sorted(p.name for p in (out / "results").iterdir()) == [
        ".cache", "devices.parquet", "epochs.parquet", "iterations.parquet", "runs.parquet"]
    read.clear()
    results.merge(out)
    assert read == []
    _same_as_from_scratch(out, tmp_path, runs)


_MERGE = "import sys; from pathlib import Path; from orchestrator import results; " \
         "[results.merge(Path(sys.argv[1])) for _ in range(3)]"


@pytest.mark.parametrize("older", [False, True], ids=["a file per run", "one file per table"])
def test_concurrent_merges_leave_a_whole_result_set(tmp_path, older):
    """Three processes merging one sweep at once, while a run changes (or rebuilding a result
    set of one file per table, each into its own private directory): each file is whole
    (never two runs' rows in one, never a private file or directory left), and the next merge
    gives the result set of a merge from scratch."""
    out, rdirs = _sweep(tmp_path)
    if older:
        shutil.rmtree(out)
        shutil.copytree(ONE_FILE, out)
        _age_all(out)
        rdirs = rundir.run_dirs(out)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", _MERGE, str(out)], env=env, cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    if not older:
        for k in range(3):
            _add_iteration(rdirs[1] / "ranks" / "rank-0.jsonl", np.random.default_rng(k))
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert not [p for p in (out / "results").rglob(".*") if p.name != ".cache"]
    assert not any((out / "results" / f"{name}.parquet").is_file() for name in resultset.TABLES)
    runs, _ = check_merge(out)
    _same_as_from_scratch(out, tmp_path, runs)


@pytest.mark.parametrize("name", resultset.TABLES)
def test_reading_a_table_that_is_not_there(tmp_path, name):
    assert resultset.read_table(tmp_path / f"{name}.parquet") is None
    (tmp_path / f"{name}.parquet").mkdir()
    assert resultset.read_table(tmp_path / f"{name}.parquet") is None
