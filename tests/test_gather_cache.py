"""Incremental gather: results/.cache/ lets a re-merge read only the logs of runs that changed,
and the result set stays exactly that of a merge from scratch (tests/test_report.check_merge)."""

from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np
import pyarrow.parquet as pq

from orchestrator import protocol, results
from orchestrator.results import cache, resultset

from .test_report import FOOTER, check_merge, dumps, header, iteration, make_run


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
    for log in out.glob("*/ranks/*.jsonl"):
        _age(log)
    return out, rdirs


def _age(path, seconds=60):
    """Logs written seconds ago (a log written within RACY_S is never taken from the cache)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - int(seconds * 1e9)))


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


def test_regather_reads_only_the_changed_run(tmp_path, monkeypatch):
    out, rdirs = _sweep(tmp_path)
    read = _count_reads(monkeypatch)
    check_merge(out)
    assert len(read) == 1 + 2 + 4
    assert sorted(p.name for p in (out / results.CACHE_DIR).iterdir()) == sorted(
        f"{r.name}.json" for r in rdirs)
    first = pq.read_table(out / "results" / "iterations.parquet")

    read.clear()
    runs, again = check_merge(out)  # nothing changed: no log is read, same result set
    assert read == [] and again.equals(first)

    # the 2-node run gets one more iteration on rank 1: only its two logs are read
    rng = np.random.default_rng(8)
    log = rdirs[1] / "ranks" / "rank-1.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines[:-1], dumps(iteration(8, rng, warmup=2)), lines[-1]]) + "\n")
    _age(log, 30)
    read.clear()
    runs, changed = check_merge(out)
    assert sorted(p.parent.parent.name for p in read) == [rdirs[1].name] * 2
    assert changed.num_rows == first.num_rows + 1

    # a run removed: its cache entry goes too; a corrupt entry is just a miss
    shutil.rmtree(rdirs[0])
    (out / results.CACHE_DIR / f"{rdirs[2].name}.json").write_text("{not json")
    read.clear()
    runs, _ = check_merge(out)
    assert len(runs) == 2 and len(read) == 4  # only the 4-node run, whose entry was corrupt
    assert sorted(p.name for p in (out / results.CACHE_DIR).iterdir()) == sorted(
        f"{r.name}.json" for r in rdirs[1:])


def test_a_replaced_parquet_or_run_json_invalidates(tmp_path, monkeypatch):
    out, rdirs = _sweep(tmp_path)
    check_merge(out)
    read = _count_reads(monkeypatch)
    # iterations.parquet rewritten by something else: its rows cannot be trusted by offset
    parquet = out / "results" / "iterations.parquet"
    parquet.write_bytes(parquet.read_bytes())
    check_merge(out)
    assert len(read) == 7
    # run.json edited (same logs): that run is re-read
    run_json = rdirs[2] / "run.json"
    data = json.loads(run_json.read_text())
    run_json.write_text(json.dumps(data, indent=1))
    read.clear()
    check_merge(out)
    assert len(read) == 4


def test_an_entry_of_another_format_is_a_miss(tmp_path, monkeypatch):
    """An entry written by an older orch (version 2, plain dict) or one whose fields are not
    what they should be: that run's logs are read again, never a crash, and its entry is
    rewritten in this version's format."""
    out, rdirs = _sweep(tmp_path)
    check_merge(out)
    entries = out / results.CACHE_DIR
    old = json.loads((entries / f"{rdirs[1].name}.json").read_text())
    (entries / f"{rdirs[1].name}.json").write_text(json.dumps({**old, "version": 2}))
    (entries / f"{rdirs[2].name}.json").write_text(json.dumps({**old, "count": "many"}))
    read = _count_reads(monkeypatch)
    check_merge(out)
    assert sorted(p.parent.parent.name for p in read) == sorted(
        [rdirs[1].name] * 2 + [rdirs[2].name] * 4)
    for rdir in rdirs:
        entry = cache.CacheEntry.model_validate_json((entries / f"{rdir.name}.json").read_text())
        assert entry.version == cache.CACHE_VERSION


def test_a_merge_in_many_batches_is_the_same(tmp_path, monkeypatch):
    """Runs parsed and written one batch at a time (here: one run per batch, each appended to
    iterations.parquet as row groups of its own), and a re-merge taking the unchanged runs'
    rows from those row groups: the result set of a merge in one go."""
    monkeypatch.setattr(resultset, "BATCH_BYTES", 1)
    out, rdirs = _sweep(tmp_path)
    check_merge(out)
    assert pq.ParquetFile(out / "results" / "iterations.parquet").num_row_groups == 3
    log = rdirs[0] / "ranks" / "rank-0.jsonl"
    log.write_text(log.read_text())  # rewritten: a new mtime, the same rows
    _age(log, 30)
    read = _count_reads(monkeypatch)
    check_merge(out)
    assert [p.parent.parent.name for p in read] == [rdirs[0].name]


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
