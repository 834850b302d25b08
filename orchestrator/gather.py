"""Gather: read every rank log of a run, decide whether the run really succeeded, merge a sweep.

A scheduler's COMPLETED only means the job script exited 0. A run is COMPLETED for orch when
every rank wrote a header, every measured iteration and an ``ok`` footer, and (for synchronous
modes) all ranks ended with the same parameter checksum. Anything else is FAILED with a reason
taken from the logs, so a failure is data in the result set, not a guess.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import modes
from .sweep import Run

PHASES = ("t_io", "t_h2d", "t_f", "t_b", "t_comm", "t_u")
CHECKSUM_RTOL = 1e-6


@dataclass
class RankLog:
    rank: int
    header: dict | None = None
    iters: list[dict] = field(default_factory=list)
    footer: dict | None = None
    problems: list[str] = field(default_factory=list)


def read_rank_log(path: Path) -> RankLog:
    """Parse one JSONL rank log; a torn line (rank killed mid-write) is a problem, not a crash."""
    rank = int(path.stem.split("-")[-1])
    out = RankLog(rank=rank)
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                out.problems.append(f"{path.name}:{lineno}: unreadable line")
                continue
            kind = rec.get("type")
            if kind == "iter":
                out.iters.append(rec)
            elif kind == "header":
                out.header = rec
            elif kind == "footer":
                out.footer = rec
    return out


def read_run_logs(rdir: Path) -> list[RankLog]:
    return [read_rank_log(p) for p in sorted((rdir / "ranks").glob("rank-*.jsonl"),
                                             key=lambda p: int(p.stem.split("-")[-1]))]


def tail(path: Path, lines: int = 12) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").rstrip().splitlines()
    return "\n".join(text[-lines:])


def verdict(run: Run, rdir: Path, logs: list[RankLog]) -> tuple[bool, str | None]:
    """(ok, reason): does the run's data prove it completed?

    When several ranks failed, the reason is the root cause: the rank whose own error came
    first (the others typically died of a closed connection, or were stopped by the launcher).
    """
    by_rank = {log.rank: log for log in logs}
    mode = modes.get(run.mode)
    tasks = run.tasks()
    trains = [k for k, t in enumerate(tasks) if t.role in mode.logging_roles]
    problems: list[tuple[int, float, str]] = []  # (kind, when, message): lowest sorts first
    for rank, task in enumerate(tasks):
        label = f"rank {rank}" if task.role == "worker" else f"rank {rank} ({task.role})"
        log = by_rank.get(rank)
        if log is None:
            problems.append((2, 0.0, f"{label}: no log{_excerpt(rdir, rank)}"))
        elif log.footer is None:
            problems.append((1, 0.0, f"{label}: log ends without a footer (killed?)"
                                     f"{_excerpt(rdir, rank)}"))
        elif log.footer.get("status") != "ok":
            error = (log.footer.get("error") or "failed").strip()
            problems.append((0, log.footer.get("ended_at") or 0.0, f"{label}: {error}"))
        elif rank in trains:
            measured = [r for r in log.iters if not r.get("warmup")]
            if len(measured) != run.iters:
                problems.append((3, 0.0, f"{label}: {len(measured)} of {run.iters} "
                                         "measured iterations logged"))
    if problems:
        return False, min(problems)[2]
    if mode.synchronous and len(trains) > 1:
        sums = {r: by_rank[r].footer.get("param_checksum") for r in trains}
        if all(isinstance(s, (int, float)) for s in sums.values()):
            first, ref = trains[0], sums[trains[0]]
            for r, s in sums.items():
                if not math.isclose(s, ref, rel_tol=CHECKSUM_RTOL, abs_tol=1e-9):
                    return False, (f"ranks out of sync: parameter checksum of rank {r} is {s!r}, "
                                   f"rank {first} has {ref!r}")
    return True, None


def _excerpt(rdir: Path, rank: int) -> str:
    text = tail(rdir / "ranks" / f"rank-{rank}.out", 6)
    return f"; its output ends:\n{text}" if text else ""


def failure_reason(rdir: Path, run: Run, logs: list[RankLog]) -> str:
    """Best explanation of a failed job: a rank's own error, else the job output's tail."""
    ok, reason = verdict(run, rdir, logs)
    if not ok and reason:
        return reason
    outs = sorted(rdir.glob("slurm-*.out"))
    return tail(outs[-1]) if outs else "job failed without output"


# --- merging -------------------------------------------------------------------------------

RUN_COLUMNS = ("run_id", "site", "partition", "interconnect", "mode", "framework", "launcher",
               "model", "dataset", "nodes", "tasks_per_node", "batch_size", "warmup", "repeat")


def iteration_rows(run: Run, logs: list[RankLog]) -> list[dict]:
    rows = []
    for log in logs:
        header = log.header or {}
        for rec in log.iters:
            row = {c: getattr(run, c) for c in RUN_COLUMNS}
            row.update(
                ranks=run.ranks, rank=log.rank, host=header.get("host"),
                node=header.get("node"), node_rank=header.get("node_rank"),
                iter=rec["iter"], warmup_iter=bool(rec.get("warmup")), t_start=rec["t_start"],
                t_iter=rec["t_iter"], samples=rec.get("samples", run.batch_size),
                t_comm_total=rec.get("t_comm_total"),
            )
            for name in PHASES:
                row[name] = rec.get(name, 0.0)
            rows.append(row)
    return rows


ITER_SCHEMA = pa.schema(
    [(c, pa.string()) for c in RUN_COLUMNS[:9]]
    + [(c, pa.int64()) for c in ("nodes", "tasks_per_node", "batch_size", "warmup", "repeat")]
    + [("ranks", pa.int64()), ("rank", pa.int64()), ("host", pa.string()),
       ("node", pa.string()), ("node_rank", pa.int64()), ("iter", pa.int64()),
       ("warmup_iter", pa.bool_()), ("t_start", pa.float64()), ("t_iter", pa.float64()),
       ("samples", pa.int64()), ("t_comm_total", pa.float64())]
    + [(p, pa.float64()) for p in PHASES]
)


def iteration_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ITER_SCHEMA)


def write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)


def footer_facts(logs: list[RankLog]) -> dict:
    """Per-run facts from the rank footers: memory, versions, checksum agreement."""
    footers = [log.footer for log in logs if log.footer]
    rss = [f.get("peak_rss_bytes") for f in footers if f.get("peak_rss_bytes")]
    sums = [f.get("param_checksum") for f in footers if f.get("param_checksum") is not None]
    first = footers[0] if footers else {}
    return {
        "peak_rss_bytes": max(rss) if rss else None,
        "versions": json.dumps(first.get("versions") or {}, sort_keys=True),
        "param_checksum": sums[0] if sums else None,
        "checksums_agree": (all(math.isclose(s, sums[0], rel_tol=CHECKSUM_RTOL, abs_tol=1e-9)
                                for s in sums) if sums else None),
    }
