"""The fast merge on logs with two windows (native, then breakdown; protocol.py) and bad lines.

The fast path (pyarrow's CSV reader over the raw iteration lines of many logs) must give the
result set of the exact row-by-row path (read_rank_log + iteration_rows), with the ``window``
column: native rows without phases (null), breakdown rows with them; a malformed line, in either
window, is a problem of that log (the slow path reads it), never a crash or a wrong row.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from orchestrator import protocol, results
from orchestrator.results import gather
from orchestrator.results import iterations as tables
from orchestrator.runs import rundir

from .test_report import (
    FOOTER,
    check_merge,
    dumps,
    header,
    iteration,
    iterations_table,
    make_run,
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
        _, fast = check_merge(out)
        # Lines the fast path takes as they are (a blank line, an explicit null phase among
        # phases); any other makes only this log go slow. A NaN, which Python's json reads,
        # is an impossible value there: its row is left out (a violation of that log).
        fast_ok = {"blank"} | ({"null phase"} if where == "breakdown" else set())
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


# The two rank-log readers agree on anything: a seeded mutator damages real rank logs (a local
# sweep of orch 0.1.0, and recorded H200 runs with GPU footers), and the fast merge
# (read_rank_log(raw_iters=True) + merged_iteration_table, batches of runs as a merge reads
# them) must give the reference reader's table (read_rank_log + iteration_rows) with the same
# problems, headers and footers, and nothing downstream may raise. The count of cases bounds
# it, not a clock; ORCH_FUZZ_CASES runs more (a different seed with ORCH_FUZZ_SEED).
FUZZ_CASES = int(os.environ.get("ORCH_FUZZ_CASES", "2000"))
FUZZ_SEED = int(os.environ.get("ORCH_FUZZ_SEED", "51"))
FUZZ_BATCH = 100
FIXTURES = Path(__file__).parent / "fixtures"
FUZZ_BASES = (
    FIXTURES / "sweep-0.1.0" / "sweep" / "torch-ddp-lenet5-local-n1-r0-d8f29a07",
    FIXTURES / "sweep-0.1.0" / "sweep" / "torch-ddp-lenet5-local-n2-r0-3db6a59c",
    FIXTURES / "gpu-h200-metrics" / "torch-ddp-resnet50-gpu-n1-r0-20e57856",
    FIXTURES / "gpu-h200-devmetrics" / "torch-ddp-resnet18-gpu-n1-r0-b7e88c97",
    FIXTURES / "gpu-h200" / "mpi-ssgd-resnet18-gpu-n1-r0-cef3255e",
)
# Values put in place of a value, or under a new key: too big, not finite, spelled as Arrow
# reads numbers but JSON does not, of another type.
ODD_VALUES = (b"1e400", b"-1e400", b"1e308", b"123456789012345678901234567890",
              b"-9223372036854775809", b"9223372036854775807", b"NaN", b"Infinity",
              b"-Infinity", b"nan", b"inf", b"-inf", b"+1", b"01", b".5", b"5.", b"0x10",
              b"1e", b"-0", b"00", b"1_0", b"-0.0", b'"x"', b'"0.5"', b"true", b"false",
              b"null", b"[]", b"{}", b'{"a":1}', b"1.5", b"0", b"-1", b"-0.001", b'"a:b,c"',
              b'"\\u0000"')
_VALUE = re.compile(rb'"([A-Za-z_]+)":(-?[0-9][0-9.eE+-]*|true|false|null|"[^"]*")')


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _a_value(rng, data: bytes, _other: bytes) -> bytes:
    spans = list(_VALUE.finditer(data))
    if not spans:
        return data
    m = spans[rng.integers(len(spans))]
    value = ODD_VALUES[rng.integers(len(ODD_VALUES))]
    return data[:m.start(2)] + value + data[m.end(2):]


def _a_key(rng, data: bytes, _other: bytes) -> bytes:
    lines = _lines(data)
    k = int(rng.integers(len(lines)))
    if lines[k].endswith(b"}"):
        key = [b"t_x", b"note", b"queued", b"epoch", b"t_f", b"window"][rng.integers(6)]
        value = ODD_VALUES[rng.integers(len(ODD_VALUES))]
        lines[k] = lines[k][:-1] + b',"' + key + b'":' + value + b"}"
    return b"\n".join(lines)


def _truncate(rng, data: bytes, _other: bytes) -> bytes:
    return data[:int(rng.integers(len(data) + 1))]


def _flip(rng, data: bytes, _other: bytes) -> bytes:
    if not data:
        return data
    at = int(rng.integers(len(data)))
    byte = data[at] ^ (1 << int(rng.integers(8))) if rng.random() < 0.5 else int(
        rng.integers(256))
    return data[:at] + bytes([byte]) + data[at + 1:]


def _duplicate(rng, data: bytes, _other: bytes) -> bytes:
    lines = _lines(data)
    k = int(rng.integers(len(lines)))
    return b"\n".join([*lines[:k + 1], lines[k], *lines[k + 1:]])


def _swap(rng, data: bytes, _other: bytes) -> bytes:
    lines = _lines(data)
    i, j = (int(x) for x in rng.integers(len(lines), size=2))
    lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def _delete(rng, data: bytes, _other: bytes) -> bytes:
    lines = _lines(data)
    del lines[int(rng.integers(len(lines)))]
    return b"\n".join(lines)


def _interleave(rng, data: bytes, other: bytes) -> bytes:
    """Lines of another rank's log among these (two writers into one file)."""
    lines, theirs = _lines(data), _lines(other)
    for _ in range(int(rng.integers(1, 4))):
        lines.insert(int(rng.integers(len(lines) + 1)), theirs[rng.integers(len(theirs))])
    return b"\n".join(lines)


def _join(rng, data: bytes, _other: bytes) -> bytes:
    """Two lines written without the newline between them."""
    at = [i for i, b in enumerate(data) if b == 10]
    if not at:
        return data
    k = at[rng.integers(len(at))]
    return data[:k] + data[k + 1:]


def _crlf(rng, data: bytes, _other: bytes) -> bytes:
    if rng.random() < 0.5:
        return data.replace(b"\n", b"\r\n")
    lines = _lines(data)
    k = int(rng.integers(len(lines)))
    lines[k] += b"\r"
    return b"\n".join(lines)


def _nul(rng, data: bytes, _other: bytes) -> bytes:
    if rng.random() < 0.3:  # a block of NULs, as a crash leaves in a preallocated file
        lines = _lines(data)
        lines.insert(int(rng.integers(len(lines) + 1)), b"\x00" * int(rng.integers(1, 64)))
        return b"\n".join(lines)
    at = int(rng.integers(len(data) + 1))
    return data[:at] + b"\x00" + data[at:]


def _blank(rng, data: bytes, _other: bytes) -> bytes:
    lines = _lines(data)
    lines.insert(int(rng.integers(len(lines) + 1)), [b"", b"  ", b"\t"][rng.integers(3)])
    return b"\n".join(lines)


MUTATIONS = (_a_value, _a_value, _a_value, _a_key, _truncate, _flip, _flip, _duplicate, _swap,
             _delete, _interleave, _join, _crlf, _nul, _blank)


def _fuzz_case(rng, bases: list[tuple[object, Path, dict[str, bytes]]]):
    """(base run, its rank logs as bytes, one or more of them mutated)."""
    run, rdir, logs = bases[rng.integers(len(bases))]
    logs = dict(logs)
    names = sorted(logs)
    for _ in range(int(rng.integers(1, 4))):
        name = names[rng.integers(len(names))]
        other = logs[names[rng.integers(len(names))]]
        mutate = MUTATIONS[rng.integers(len(MUTATIONS))]
        logs[name] = mutate(rng, logs[name], other)
    return run, rdir, logs


def _json(value) -> str:
    return json.dumps(value, sort_keys=True)


def _agree(run, rdir: Path, fast_logs, fast_table, case: str) -> None:
    """The fast merge's rows and logs of one case against the reference reader's; then what
    reads those logs downstream, on both, raises nothing."""
    from orchestrator.results import analyze, devices, gather
    from orchestrator.results.dimensions import dimension_facts
    from orchestrator.runs import fabric, verdict

    ref_logs = verdict.read_run_logs(rdir)
    reference = tables.iteration_table(tables.iteration_rows(run, ref_logs))
    fast = tables.plain_strings(fast_table).cast(tables.ITER_SCHEMA)
    assert fast.equals(reference), case
    for fast_log, ref in zip(fast_logs, ref_logs, strict=True):
        assert fast_log.problems == ref.problems, case
        assert _json(fast_log.header) == _json(ref.header), case
        assert _json(fast_log.footer) == _json(ref.footer), case
        records = [v for v in ref.violations if ": footer:" not in v]
        assert [v for v in fast_log.violations if ": footer:" not in v] in ([], records), case
    for logs in (ref_logs, fast_logs):
        verdict.verdict(run, rdir, logs)
        gather.footer_facts(logs)
        dimension_facts(run, logs)
        devices.run_facts(logs)
        fabric.attest(run, rdir, logs)
    frame = tables.plain_strings(fast_table).select(list(analyze.ITER_COLUMNS)).to_pandas()
    analyze.run_metrics(frame)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # metrics of runs left with no rows
def test_fast_and_reference_readers_agree_on_mutated_real_logs(tmp_path):
    rng = np.random.default_rng(FUZZ_SEED)
    bases = [(rundir.read_run(rdir), rdir, {p.name: p.read_bytes()
                                            for p in sorted((rdir / "ranks").glob("rank-*.jsonl"))})
             for rdir in FUZZ_BASES]
    slots = [tmp_path / f"slot-{k}" for k in range(FUZZ_BATCH)]
    for slot in slots:
        (slot / "ranks").mkdir(parents=True)
    for start in range(0, FUZZ_CASES, FUZZ_BATCH):
        cases = []
        for n in range(start, min(start + FUZZ_BATCH, FUZZ_CASES)):
            slot = slots[n - start]
            run, base, logs = _fuzz_case(rng, bases)
            _write_case(slot, logs)
            # a run object of its own, as each run directory of a sweep has
            cases.append((run.model_copy(), slot, f"case {n} (seed {FUZZ_SEED}) from "
                          f"{base.name}"))
        scanned = gather.scan_runs_logs([rdir for _, rdir, _ in cases])
        table, counts = tables.merged_iteration_table(
            [(run, logs) for (run, _, _), logs in zip(cases, scanned, strict=True)])
        at = 0
        for (run, rdir, case), logs, count in zip(cases, scanned, counts, strict=True):
            _agree(run, rdir, logs, table.slice(at, count), case)
            at += count


def _write_case(slot: Path, logs: dict[str, bytes]) -> None:
    """A case's rank logs in a run directory used again and again (creating and deleting
    thousands of files costs more than the test on some file systems)."""
    for old in (slot / "ranks").iterdir():
        if old.name not in logs:
            old.unlink()
    for name, data in logs.items():
        (slot / "ranks" / name).write_bytes(data)
