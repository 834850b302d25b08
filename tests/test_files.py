"""A full or read-only disk loses nothing (orchestrator/files.py): every write of the result set,
its caches and the ledgers names the file, its directory and the space it needed, leaves no
private file behind, keeps what was there before, and the next ``orch gather`` succeeds once
there is room again.

On a real small file system: a tmpfs each test mounts and unmounts itself (root, as CI runs;
under ``CI=true`` a tmpfs that cannot be mounted fails the test, elsewhere it is skipped)."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator import files, results
from orchestrator.execute import ledger
from orchestrator.results import resultset
from orchestrator.runs import rundir

from .conftest import IN_CI, orch
from .test_gather_cache import _age, _age_all, _sweep


@contextlib.contextmanager
def _mounted(where: Path, size: str):
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        why = f"cannot mount a tmpfs at {where} ({proc.stderr.strip()}): this test needs root"
        if IN_CI:
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    try:
        yield where
    finally:
        gc.collect()  # a failed test's traceback may still hold a file open there
        subprocess.run(["umount", str(where)], check=True)


@pytest.fixture
def small_fs(tmp_path):
    """A 1 MiB tmpfs, mounted for this test only."""
    with _mounted(tmp_path / "fs", "1m") as where:
        yield where


def _remount(where: Path, how: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{how}", str(where)], check=True)


def _fill(where: Path) -> Path:
    """Fill the file system of ``where`` to its last byte; returns the filler (remove it to
    free the space)."""
    filler = where / "filler"
    with open(filler, "wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)
    return filler


def _leftovers(where: Path) -> list[Path]:
    """Private files of a write (files._tmp) or of a merge's staged directory, anywhere."""
    return [p for p in where.rglob(".*") if p.name.endswith((".tmp", ".new", ".old"))]


def _snapshot(where: Path) -> dict[str, bytes]:
    return {str(p.relative_to(where)): p.read_bytes() for p in where.rglob("*")
            if p.is_file() and p.name != "filler"}


def test_a_write_to_a_full_disk_says_what_and_keeps_the_old_file(small_fs):
    target = small_fs / "job.json"
    files.write_text_atomic(target, "old\n")
    _fill(small_fs)
    with pytest.raises(files.WriteFailed) as failed:
        files.write_bytes_atomic(target, b"x" * 100_000)
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(f"cannot write job.json in {small_fs}: no space left on the "
                              "device (it needs 97.7 KiB, ")
    assert "free there); job.json is as it was and no partial file is left: free space" in message
    assert failed.value.errno == errno.ENOSPC and isinstance(failed.value, OSError)
    assert target.read_text() == "old\n" and _leftovers(small_fs) == []


def test_an_arrow_writer_on_a_full_disk_leaves_nothing_behind(small_fs):
    """Arrow's own writer says only "Error writing bytes to file ... [errno 28]": the failure
    names the file, what it had written, and its private file is gone."""
    target = small_fs / "table.parquet"
    _fill(small_fs)
    table = pa.table({"x": list(range(200_000))})
    with pytest.raises(files.WriteFailed) as failed:
        files.replace_with(target, lambda tmp: pq.write_table(table, tmp, compression="none"))
    assert failed.value.errno == errno.ENOSPC
    assert str(failed.value).startswith(f"cannot write table.parquet in {small_fs}: no space")
    assert not target.exists() and _leftovers(small_fs) == []


def test_an_append_to_a_full_disk_leaves_the_ledger_as_it_was(small_fs):
    path = small_fs / ledger.FILE
    ledger.append(small_fs, [{"run_id": "a", "t_iter": 0.1}])
    before = path.read_bytes()
    filler = _fill(small_fs)
    filler.write_bytes(filler.read_bytes()[:-1000])  # room for a part of the next line only
    with pytest.raises(files.WriteFailed) as failed:
        ledger.append(small_fs, [{"run_id": f"b{k}", "note": "x" * 200} for k in range(20)])
    assert str(failed.value).startswith(f"cannot write {ledger.FILE} in {small_fs}: no space")
    assert path.read_bytes() == before  # no torn line after the one it held


def test_a_read_only_directory_says_so(small_fs):
    target = small_fs / "runs.parquet"
    files.write_text_atomic(target, "old")
    _remount(small_fs, "ro")
    try:
        for write in (lambda: files.write_text_atomic(target, "new"),
                      lambda: files.make_dirs(small_fs / "results"),
                      lambda: files.remove(target)):
            with pytest.raises(files.WriteFailed, match="the file system is read-only"):
                write()
    finally:
        _remount(small_fs, "rw")
    assert target.read_text() == "old" and _leftovers(small_fs) == []


def test_a_gather_on_a_full_disk_loses_nothing_and_succeeds_once_freed(small_fs, tmp_path):
    """A sweep on a small file system, merged, then one run changed and the disk full:
    ``orch results`` exits 2 with one line naming the file, the directory and the space; the
    result set, the cache and the ledgers are as they were; once there is room, ``orch
    gather`` merges it, the result set of a merge from scratch."""
    out, rdirs = _sweep(small_fs)
    code, _, err = orch("gather", out)
    assert code == 0, err
    log = rdirs[1] / "ranks" / "rank-0.jsonl"
    _age(log, 30)  # a new mtime: the run is merged again
    before = _snapshot(out)
    filler = _fill(small_fs)
    code, stdout, err = orch("results", out)
    assert code == 2 and stdout == ""
    [line] = err.splitlines()
    found = re.fullmatch(r"orch: error: cannot write (\S+) in (\S+): no space left on the "
                         r"device \(it needs [\d.]+ (B|KiB), 0 B free there\); \1 is as it was "
                         r"and no partial file is left: free space there, then run the "
                         r"command again", line)
    assert found and Path(found.group(2)).is_relative_to(out / "results"), line
    assert _snapshot(out) == before and _leftovers(small_fs) == []
    # a log truncated since it was finalized: re-checking it rewrites its ledger entry first
    filler.unlink()
    record = rundir.read_record(rdirs[2])
    rundir.write_record(rdirs[2], record.model_copy(
        update={"logs_digest": rundir.logs_digest(rdirs[2])}))
    _age_all(out)
    code, _, err = orch("gather", out)
    assert code == 0, err
    filler = _fill(small_fs)
    truncated = rdirs[2] / "ranks" / "rank-3.jsonl"
    with open(truncated, "r+b") as fh:
        fh.truncate(truncated.stat().st_size - 100)
    _age(truncated, 30)
    before = _snapshot(out)
    code, _, err = orch("results", out)
    assert code == 2
    assert f"cannot write job.json in {rdirs[2]}: no space left" in err
    assert _snapshot(out) == before and _leftovers(small_fs) == []

    filler.unlink()
    code, _, err = orch("gather", out)
    assert code == 0, err
    assert rundir.read_record(rdirs[2]).state == "FAILED"
    fresh = tmp_path / "fresh"
    for rdir in rundir.run_dirs(out):
        shutil.copytree(rdir, fresh / rdir.name)
    pd.testing.assert_frame_equal(results.merge(out), results.merge(fresh))
    assert _leftovers(small_fs) == []


def test_a_gather_into_a_read_only_directory_changes_nothing(small_fs):
    out, rdirs = _sweep(small_fs)
    assert orch("gather", out)[0] == 0
    assert orch("results", out)[0] == 0  # nothing changed: nothing to write
    _age(rdirs[0] / "ranks" / "rank-0.jsonl", 30)
    before = _snapshot(out)
    _remount(small_fs, "ro")
    try:
        code, _, err = orch("results", out)
    finally:
        _remount(small_fs, "rw")
    assert code == 2 and len(err.splitlines()) == 1
    found = re.match(r"orch: error: cannot write (\S+) in (\S+): the file system is read-only; "
                     r"\1 is as it was and no partial file is left: make it writable or move "
                     r"the sweep, then run the command again$", err)
    assert found and Path(found.group(2)).is_relative_to(out / "results"), err
    assert _snapshot(out) == before
    code, _, err = orch("gather", out)
    assert code == 0, err


def test_an_older_result_set_on_a_full_disk_stays_as_it_was(small_fs):
    """Rebuilding a result set of one file per table into the per-run layout: on a full disk
    the old files stay, the half-written directory goes."""
    from .test_gather_cache import ONE_FILE

    out = small_fs / "sweep"
    shutil.copytree(ONE_FILE, out)
    _age_all(out)
    before = _snapshot(out)
    filler = _fill(small_fs)
    with pytest.raises(files.WriteFailed):
        results.merge(out)
    assert _snapshot(out) == before and _leftovers(small_fs) == []
    assert (out / resultset.ITERATIONS).is_file()
    filler.unlink()
    results.merge(out)
    assert (out / resultset.ITERATIONS).is_dir()


def test_the_errno_of_an_arrow_error_is_read_from_its_text(tmp_path):
    cause = OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")
    failed = files.WriteFailed(tmp_path / "x.parquet", cause, 10)
    assert failed.errno == errno.ENOSPC and "no space left on the device" in str(failed)
    failed = files.WriteFailed(tmp_path / "x.parquet", OSError("odd"), None)
    assert failed.errno is None and str(failed).startswith("cannot write x.parquet in ")
    assert os.fspath(tmp_path) in str(failed)
