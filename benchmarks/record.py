"""A benchmark's result as a data file: ``benchmarks/results/<benchmark>/<date>-<commit>.json``.

Every benchmark of this folder ends by calling :func:`write` with its figures and a one-line
summary; ``python -m benchmarks.page`` renders ``docs/benchmarks.md`` from these files, latest
first, so a figure on that page is always one some run wrote down, with its machine, date,
orch commit and command. A file is never overwritten: a second result of the same day and
commit gets ``-2``, ``-3``, ... appended.

    python -m benchmarks.record gpu-check /tmp/gpu-check   # scripts/gpu-check's $OUT, as data
                                                           # (and its results/*/*.json, as written)
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


class Table(BaseModel):
    """A table of a result (one row per run, mode or configuration), rendered as Markdown."""

    model_config = ConfigDict(extra="forbid")
    title: str = ""
    columns: list[str]
    rows: list[list[str]]


class Result(BaseModel):
    """One run of one benchmark."""

    model_config = ConfigDict(extra="forbid")
    benchmark: str
    date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="UTC day the run ended")
    commit: str | None = Field(None, description="orch's git commit (short); None: not known")
    dirty: bool = Field(False, description="the checkout had uncommitted changes")
    machine: str = Field(description="a name of benchmarks/results/machines.json, or what it was")
    command: str
    summary: str = Field(description="the figures as read, one Markdown line")
    figures: dict[str, Any] = Field(default_factory=dict, description="the numbers, by name")
    tables: list[Table] = Field(default_factory=list)
    notes: str = Field("", description="Markdown paragraphs: what the figures mean, caveats")


def _git(*args: str) -> str:
    proc = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def this_machine() -> str:
    """``$ORCH_BENCH_MACHINE`` (a name of machines.json), else this machine's CPUs and OS."""
    return os.environ.get("ORCH_BENCH_MACHINE") or (
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}")


def this_commit() -> str | None:
    """``$ORCH_BENCH_COMMIT`` (the commit a copy without its .git ran, a GPU machine's), else
    this checkout's HEAD."""
    return os.environ.get("ORCH_BENCH_COMMIT") or _git("rev-parse", "--short", "HEAD") or None


def this_command(benchmark: str) -> str:
    """The command line that ran: ``python -m benchmarks.<module>`` and its arguments."""
    return shlex.join(["python", "-m", f"benchmarks.{benchmark}", *sys.argv[1:]])


def free_path(folder: Path, stem: str) -> Path:
    """``folder/stem.json``, or ``stem-2.json``, ``stem-3.json``... if taken (never overwrite)."""
    path, n = folder / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.json"
    return path


def save(result: Result, root: Path = RESULTS) -> Path:
    """Write ``result`` under ``root/<benchmark>/`` and return its path."""
    folder = root / result.benchmark
    folder.mkdir(parents=True, exist_ok=True)
    path = free_path(folder, f"{result.date}-{result.commit or 'unknown'}")
    path.write_text(result.model_dump_json(indent=2, exclude_defaults=True) + "\n")
    return path


def write(benchmark: str, summary: str, figures: dict[str, Any], *,
          tables: list[Table] | None = None, notes: str = "", root: Path = RESULTS) -> Path:
    """Record a run of ``benchmark`` that just ended on this machine, at this checkout."""
    result = Result(
        benchmark=benchmark, date=dt.datetime.now(dt.timezone.utc).date().isoformat(),
        commit=this_commit(),
        # A copy run at $ORCH_BENCH_COMMIT was that commit (git archive); this checkout's
        # state says nothing of it.
        dirty=not os.environ.get("ORCH_BENCH_COMMIT") and bool(
            _git("status", "--porcelain", "--untracked-files=no")),
        machine=this_machine(), command=this_command(benchmark), summary=summary,
        figures=figures, tables=tables or [], notes=notes)
    path = save(result, root)
    print(f"result written: {path.relative_to(root.parent) if root == RESULTS else path}")
    return path


def load_all(root: Path = RESULTS) -> dict[str, list[Result]]:
    """Every result under ``root``, by benchmark, latest first (date, then file name)."""
    out: dict[str, list[tuple[str, str, Result]]] = {}
    for path in sorted(root.glob("*/*.json")):
        try:
            result = Result.model_validate_json(path.read_text())
        except ValueError as e:
            raise SystemExit(f"{path}: not a benchmark result ({e}); fix or remove it") from e
        out.setdefault(path.parent.name, []).append((result.date, _nth(path), result))
    return {name: [r for *_, r in sorted(rows, key=lambda t: (t[0], t[1]), reverse=True)]
            for name, rows in out.items()}


def _nth(path: Path) -> int:
    """Which result of its day and commit ``path`` is: 1, or the N of ``-N`` (free_path)."""
    stem = path.stem.removeprefix(path.stem[:10])  # the date, then -commit[-N]
    parts = stem.split("-")
    return int(parts[-1]) if len(parts) > 2 and parts[-1].isdigit() else 1


# What the gpu-check table shows of each run (orch results' JSON columns).
GPU_COLUMNS = ("mode", "model", "launcher", "precision", "memory_format", "compile",
               "pin_memory", "cudnn_benchmark", "samples_per_s", "tokens_per_s",
               "model_flops_per_s_per_device", "mfu", "peak_device_bytes",
               "peak_device_reserved_bytes", "t_h2d", "t_compile", "gpu_util_mean",
               "power_mean_w", "energy_per_sample_j", "throttle_reasons", "state")


def _value(row: dict, column: str) -> Any:
    """A column of ``orch results``' JSON row, or the run option of that name."""
    return row[column] if column in row else (row.get("options") or {}).get(column)


def check_day(machine_txt: str) -> str | None:
    """The UTC day of gpu-check's machine.txt, whose first line is ``date -u``'s output
    ("Thu Nov 26 11:44:32 PM UTC 2026", in whatever clock format the locale uses)."""
    first = machine_txt.splitlines()[0] if machine_txt else ""
    found = re.match(r"\w{3} (\w{3}) +(\d{1,2}) .* (\d{4})$", first.strip())
    if not found:
        return None
    day = dt.datetime.strptime(f"{found[1]} {found[2]} {found[3]}", "%b %d %Y")
    return day.date().isoformat()


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return "" if value is None else str(value)


def gpu_check_result(out: Path, summary: str = "", notes: str = "",
                     command: str = "scripts/gpu-check") -> Result:
    """scripts/gpu-check's ``$OUT`` (machine.txt, results.json) as a result of ``gpu-check``;
    ``summary`` and ``notes``: the figures as read (default: how many runs completed)."""
    machine_txt = (out / "machine.txt").read_text()
    rows = json.loads((out / "results.json").read_text())
    columns = [c for c in GPU_COLUMNS if any(_value(r, c) is not None for r in rows)]
    table = Table(columns=columns, rows=[[_cell(_value(r, c)) for c in columns] for r in rows])
    done = sum(str(r.get("state", "")).upper() == "COMPLETED" for r in rows)
    gpu = machine_txt.splitlines()[2].split(",")[0] if machine_txt.count("\n") > 2 else ""
    gpu = gpu.removeprefix("NVIDIA ").split(" ")[0]  # "NVIDIA H100 80GB HBM3": machines.json's H100
    return Result(
        benchmark="gpu-check",
        date=check_day(machine_txt) or dt.datetime.now(dt.timezone.utc).date().isoformat(),
        commit=this_commit(), machine=gpu or this_machine(), command=command,
        summary=summary or f"{done} of {len(rows)} runs completed", tables=[table],
        figures={"runs": len(rows), "completed": done}, notes=notes)


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.record",
                                description="record scripts/gpu-check's $OUT as result files")
    p.add_argument("what", choices=["gpu-check"])
    p.add_argument("out", type=Path, help="scripts/gpu-check's $OUT")
    p.add_argument("--summary", default="", help="the figures as read, one line")
    p.add_argument("--notes", type=Path, default=None, help="a Markdown file: what they mean")
    p.add_argument("--command", default="scripts/gpu-check", help="the command(s) that ran")
    a = p.parse_args(argv)
    missing = [f for f in ("machine.txt", "results.json") if not (a.out / f).is_file()]
    if missing:
        print(f"{a.out}: no {', '.join(missing)}: give scripts/gpu-check's $OUT", file=sys.stderr)
        return 2
    notes = a.notes.read_text() if a.notes else ""
    print(f"result written: {save(gpu_check_result(a.out, a.summary, notes, a.command))}")
    for path in sorted(a.out.glob("results/*/*.json")):  # the check's own benchmarks (fidelity)
        print(f"result written: {save(Result.model_validate_json(path.read_text()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
