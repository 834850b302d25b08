"""The result set from damaged sweeps: gather, status and results on a finished sweep whose
logs or ledgers were damaged exit 0/1 or with one line (2), never a traceback; and gather
re-verifies logs changed after their run was finalized."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .conftest import orch, rank0_log, run_orch
from .test_data import MANIFESTS
from .test_rundir import OUT_CASES
from .test_site import SITE_CASES
from .test_sweep import MODE_OPTION_CASES, SWEEP_CASES


def _insert(line: bytes):
    def damage(rdir: Path):
        lines = rank0_log(rdir).read_bytes().splitlines(keepends=True)
        rank0_log(rdir).write_bytes(b"".join([lines[0], line + b"\n", *lines[1:]]))
    return damage


def _write(name: str, data: bytes | None):
    def damage(rdir: Path):
        path = rdir / name
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)
    return damage


def _truncate(rdir: Path) -> None:
    data = rank0_log(rdir).read_bytes()
    rank0_log(rdir).write_bytes(data[: len(data) // 2])


def _stray(rdir: Path) -> None:
    shutil.copy(rank0_log(rdir), rdir / "ranks" / "rank-x.jsonl")


def _results_file(rdir: Path) -> None:
    shutil.rmtree(rdir.parent / "results")
    (rdir.parent / "results").write_text("x")


def _results_garbage(rdir: Path) -> None:
    (rdir.parent / "results" / "runs.parquet").write_bytes(b"garbage")


LOG_DAMAGE = {
    "log: a number": _insert(b"42"), "log: a list": _insert(b"[1, 2]"),
    "log: a string": _insert(b'"x"'), "log: null": _insert(b"null"),
    "log: iter without iter": _insert(b'{"type": "iter", "loss": 1.0}'),
    "log: iter as string": _insert(b'{"type": "iter", "iter": "1", "loss": "a"}'),
    "log: iter nan": _insert(b'{"type": "iter", "iter": 1, "t_total": NaN}'),
    "log: not utf-8": _insert(b"\xff\xfe\x00"), "log: unknown type": _insert(b'{"type": 5}'),
    "log: huge number": _insert(b'{"type": "iter", "iter": 1e999}'),
    "log: deep": _insert(b"[" * 50000 + b"]" * 50000),
    "log: truncated": _truncate, "log: emptied": _write("ranks/rank-0.jsonl", b""),
    "log: deleted": _write("ranks/rank-0.jsonl", None), "log: stray rank-x": _stray,
    "job-times garbage": _write("job-times.json", b"{"),
    "job.json deleted": _write("job.json", None),
}
LEDGER_DAMAGE = {
    "job.json garbage": _write("job.json", b"garbage"), "job.json empty": _write("job.json", b""),
    "job.json list": _write("job.json", b"[]"),
    "job.json bad state": _write("job.json", b'{"run_id": "x", "scheduler": "local", '
                                             b'"state": "EXPLODED"}'),
    "run.json garbage": _write("run.json", b"garbage"), "run.json empty": _write("run.json", b""),
    "run.json object": _write("run.json", b"{}"),
    "results is a file": _results_file,
    "provenance garbage": _write("provenance.json", b"\xff"),
}


@pytest.mark.parametrize("command", ["gather", "status", "results"])
@pytest.mark.parametrize("damage", sorted({**LOG_DAMAGE, **LEDGER_DAMAGE}))
def test_fuzz_damaged_sweep(tmp_path, finished_sweep, command, damage):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    if damage in ("log: truncated", "log: emptied", "log: deleted", "log: stray rank-x") \
            or damage.startswith("log:"):
        shutil.rmtree(out / "results")  # merged anew: the damaged log is read
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    {**LOG_DAMAGE, **LEDGER_DAMAGE}[damage](rdir)
    code, _, err = orch(command, out)
    # status reads neither results/ nor provenance.json
    expected = 2 if damage in LEDGER_DAMAGE and not (
        command == "status" and damage in ("results is a file", "provenance garbage")) else 0
    assert code in ((expected,) if expected == 2 else (0, 1)), (damage, command, code, err)
    if code == 2:
        assert err.startswith("orch: error:") and len(err.strip().splitlines()) == 1, err


def test_fuzz_has_at_least_150_cases():
    n = (len(SITE_CASES) + len(SWEEP_CASES) + len(MODE_OPTION_CASES) + len(OUT_CASES)
         + len(MANIFESTS) + 3 * len({**LOG_DAMAGE, **LEDGER_DAMAGE}))
    assert n >= 150, n


@pytest.mark.parametrize("damage", ["log: truncated", "log: emptied", "log: deleted"])
def test_gather_reverifies_changed_logs(tmp_path, finished_sweep, damage):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    assert json.loads((rdir / "job.json").read_text())["logs_digest"]
    LOG_DAMAGE[damage](rdir)
    code, _, err = orch("gather", out)
    assert code == 0, err
    rec = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]
    assert rec["state"] == "FAILED", rec
    assert rec["reason"].startswith("rank logs changed after the run was finalized: rank 0"), rec
    # unchanged logs: nothing re-judged
    shutil.rmtree(out)
    shutil.copytree(finished_sweep, out)
    orch("gather", out)
    rec = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]
    assert rec["state"] == "COMPLETED" and not rec["reason"]


def test_co_tenants_are_written_and_read_by_one_pair_of_functions(tmp_path):
    # job-times.json's list (a --pack-shared step) becomes the column; every reader of the
    # column (the validity flags, the runs table) gets the run ids back from co_tenant_ids.
    from orchestrator import protocol
    from orchestrator.perfmodel import validity
    from orchestrator.results import runs

    (tmp_path / protocol.JOB_TIMES_FILE).write_text(json.dumps({"co_tenants": ["a-1", "b-2"]}))
    column = runs._co_tenants(tmp_path)
    assert runs.co_tenant_ids(column) == ["a-1", "b-2"]
    for alone in (None, float("nan"), ""):  # NaN: how pandas holds a missing string
        assert runs.co_tenant_ids(alone) == []
        assert validity.shared_after(alone) is None
    assert "with a-1, b-2 (co_tenants" in validity.shared_after(column)


def _rank0_records(change):
    """Rewrite rank 0's measured records: ``change(record)`` -> the record as logged."""
    def damage(rdir: Path) -> None:
        lines = rank0_log(rdir).read_text().splitlines()
        out = []
        for line in lines:
            rec = json.loads(line)
            if rec["type"] == "iter" and not rec["warmup"]:
                rec = change(dict(rec))
            out.append(json.dumps(rec))
        rank0_log(rdir).write_text("\n".join(out) + "\n")
    return damage


def _first_measured(field, value):
    """Only the first measured record of the breakdown window gets ``field = value``."""
    def change(rec: dict) -> dict:
        if rec["window"] == "breakdown" and rec["iter"] == 5:
            rec[field] = value
        return rec
    return change


IMPOSSIBLE = {  # damage -> (the reason's violation, measured breakdown records left)
    "every t_iter negative": (_rank0_records(lambda r: {**r, "t_iter": -r["t_iter"]}),
                              "rank-0.jsonl:3: t_iter = -", 0),
    "a NaN t_iter": (_rank0_records(_first_measured("t_iter", float("nan"))),
                     "rank-0.jsonl:7: t_iter = NaN: not a finite number", 2),
    "an infinite phase": (_rank0_records(_first_measured("t_b", float("inf"))),
                          "rank-0.jsonl:7: t_b = Infinity: not a finite number", 2),
    "a negative phase": (_rank0_records(_first_measured("t_f", -0.5)),
                         "rank-0.jsonl:7: t_f = -0.5: a duration is not negative", 2),
    "no samples": (_rank0_records(_first_measured("samples", 0)),
                   "rank-0.jsonl:7: samples = 0 where the log's other iterations moved", 2),
    "iteration past the count": (_rank0_records(_first_measured("iter", 99)),
                                 "rank-0.jsonl:7: iter = 99: past the 8 iterations the "
                                 "header declares", 2),
}


@pytest.mark.parametrize("damage", sorted(IMPOSSIBLE))
def test_impossible_values_fail_the_run_and_reach_no_mean(tmp_path, finished_sweep, damage):
    """Impossible values in a finished run's rank log: orch gather judges the run again, it is
    FAILED with a reason naming the rank, line and value, and those rows are in no figure
    (the run's t_iter is the mean of the other measured records, or none)."""
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    change, why, left = IMPOSSIBLE[damage]
    change(rdir)
    code, _, err = orch("gather", out)
    assert code == 0, err
    rec = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]
    assert rec["state"] == "FAILED", rec
    assert rec["reason"].startswith("rank logs changed after the run was finalized: rank 0: "
                                    f"invariant violated: {why}"), rec["reason"]
    kept = [json.loads(line) for line in rank0_log(rdir).read_text().splitlines()]
    kept = [r for r in kept if r["type"] == "iter" and r["window"] == "breakdown"
            and not r["warmup"] and r["iter"] < 8 and r["samples"] and r["t_iter"] > 0
            and all(r[p] >= 0 for p in ("t_f", "t_b")) and r["t_iter"] == r["t_iter"]
            and r["t_b"] != float("inf")]
    assert len(kept) == left
    if left:
        assert rec["t_iter"] == pytest.approx(sum(r["t_iter"] for r in kept) / left)
    else:
        assert rec["t_iter"] is None
