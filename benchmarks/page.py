"""Render ``docs/benchmarks.md`` from the result files under ``benchmarks/results/``.

    python -m benchmarks.page            # rewrite docs/benchmarks.md
    python -m benchmarks.page --check    # exit 1 if it differs from what would be written

Each benchmark's folder holds ``about.md`` (its heading and what it measures, written once)
and one JSON file per run (``benchmarks/record.py``). The page lists the machines
(``machines.json``), then each benchmark: what it measures, a table of its runs latest first,
and the tables and notes of each run. Nothing on the page is typed in by hand but ``about.md``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from benchmarks.record import RESULTS, ROOT, Result, Table, load_all

PAGE = ROOT / "docs" / "benchmarks.md"
# The order of the sections; a benchmark not named here follows them, by name.
ORDER = ("slurm_overhead", "vs_reframe", "pack_speed", "harness_overhead", "cli_startup",
         "plan_speed", "merge_speed", "compare_false_alarms", "changepoints", "changes_speed",
         "compare_speed", "fidelity", "gpu-check", "time-to-accuracy", "prediction-error")
HEADER = """\
# Benchmarks and measured figures

Every figure orch's documentation quotes, with the machine, the date and the orch commit it was
measured at, latest first. This page is written by `python -m benchmarks.page` from the result
files under `benchmarks/results/<benchmark>/`, which each benchmark writes when it ends
(`python -m benchmarks.NAME --help`); the pages that explain a feature link here instead of
quoting figures. A commit of "—" was not recorded (results from before the files existed); "+"
marks a checkout with uncommitted changes.
"""


def _escape(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def table(columns: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table."""
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(_escape(c) for c in row) + " |" for row in rows)]


UNDESCRIBED = ("recorded by the benchmark as its CPUs, OS and Python (run without "
               "`$ORCH_BENCH_MACHINE`); not described in `machines.json`")


def machines_section(root: Path, results: list[Result]) -> list[str]:
    """Every machine a result names: those of machines.json, then any other, as recorded."""
    machines = json.loads((root / "machines.json").read_text())
    others = dict.fromkeys(r.machine for r in results if r.machine not in machines)
    rows = [[k, v] for k, v in machines.items()] + [[k, UNDESCRIBED] for k in others]
    return ["## Machines", "", *table(["machine", "what"], rows), ""]


# An absolute path in a recorded command is the benchmark's scratch or output folder on the
# machine it ran on, which means nothing to a reader: it is shown as DIR.
ABSOLUTE_PATH = re.compile(r"(?<=[\s=])/[^\s`'\"]+")


def shown_command(command: str) -> str:
    return ABSOLUTE_PATH.sub("DIR", command)


def _commit(r: Result) -> str:
    return "—" if r.commit is None else f"`{r.commit}`" + ("+" if r.dirty else "")


def runs_table(results: list[Result]) -> list[str]:
    return table(["date", "commit", "machine", "command", "result"],
                 [[r.date, _commit(r), r.machine, f"`{shown_command(r.command)}`", r.summary]
                  for r in results])


def _table_lines(t: Table) -> list[str]:
    return [*([t.title, ""] if t.title else []), *table(t.columns, t.rows), ""]


def details(results: list[Result]) -> list[str]:
    """The tables and notes of each run that has any, latest first."""
    out: list[str] = []
    for r in results:
        if not (r.tables or r.notes):
            continue
        out += [f"**{r.date}, {r.machine}** (`{shown_command(r.command)}`):", ""]
        for t in r.tables:
            out += _table_lines(t)
        if r.notes:
            out += [r.notes.strip(), ""]
    return out


def section(folder: Path, results: list[Result]) -> list[str]:
    about = folder / "about.md"
    if not about.is_file():
        raise SystemExit(f"{about}: missing; write the benchmark's heading and what it measures")
    return [about.read_text().strip(), "", *runs_table(results), "", *details(results)]


def render(root: Path = RESULTS) -> str:
    by_name = load_all(root)
    names = [n for n in ORDER if n in by_name] + sorted(set(by_name) - set(ORDER))
    lines = [HEADER, *machines_section(root, [r for n in names for r in by_name[n]])]
    for name in names:
        lines += section(root / name, by_name[name])
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python -m benchmarks.page",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
