"""What the command modules share: the two consoles (created on first use), the vocabulary
helpers for deprecated spellings, and the sweep-directory and run-table helpers.

Nothing here imports rich, pandas or another orch module at import time: ``orch --help`` and
``orch --version`` load this module and must stay fast (benchmarks/cli_startup.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from ..errors import UserError

# Plain (click-style) help: typer's rich help formatter imports most of rich (~0.15 s), more
# than the rest of an 'orch --help' together (benchmarks/cli_startup.py).
RICH_MARKUP_MODE = None


class Group(TyperGroup):
    """A typer group whose unused --help flag is False, not None: typer coerces a non-bool
    flag value through pydantic, whose import alone costs ~0.1 s of 'orch sweep --help'."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option


def group(help: str) -> typer.Typer:
    """A command group (orch site, env, data, container) with orch's settings."""
    return typer.Typer(cls=Group, help=help, no_args_is_help=True,
                       rich_markup_mode=RICH_MARKUP_MODE, add_completion=False)

STATE_STYLE = {"COMPLETED": "green", "FAILED": "red", "CANCELLED": "yellow", "TIMEOUT": "red",
               "RUNNING": "cyan", "PENDING": "blue", "NEW": "dim", "HUNG": "magenta",
               "OUT_OF_MEMORY": "red", "NODE_FAIL": "magenta", "BOOT_FAIL": "magenta",
               "PREEMPTED": "yellow"}


class LazyConsole:
    """A rich Console made on first use (importing rich costs ~0.1 s of every ``orch`` start)."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console = None

    def _get(self):
        if self._console is None:
            from rich.console import Console

            if self._stderr:
                self._console = Console(stderr=True, soft_wrap=True)
            else:
                # Not a terminal (a pipe, CI's log): do not wrap paths and run ids at 80 columns.
                self._console = Console(width=None if sys.stdout.isatty() else 200)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)


out_console = LazyConsole(stderr=False)
err_console = LazyConsole(stderr=True)


def log(message: str) -> None:
    """One plain line on stderr (no markup, no highlighting)."""
    err_console.print(message, highlight=False, markup=False)


# --- one vocabulary ------------------------------------------------------------------------
# An output file or directory is --out (-o; on orch sweep, whose -o is --option, only --out).
# A sweep directory is a positional argument, SWEEP: the first one of results, gather, status,
# cancel, report and export, an optional one after RUN_ID for show, trace and rerun. The old
# spellings (--output; --dir) keep working, hidden from --help, with one warning line each.

def warn(message: str) -> None:
    """One 'orch: warning: ...' line on stderr."""
    sys.stderr.write(f"orch: warning: {message}\n")
    sys.stderr.flush()


def renamed(new: Any, old: Any, new_name: str, old_name: str, use: str | None = None) -> Any:
    """The value given under the new or the deprecated spelling of an option (not both).

    The deprecated spelling prints one line: ``orch: warning: OLD is deprecated; use USE``.
    """
    if old is None:
        return new
    warn(f"{old_name} is deprecated; use {use or new_name}")
    if new is not None and new != old:
        raise UserError(f"{old_name} {old} and {new_name} {new}: give only {new_name}")
    return old


def find_run(command: str, run_id: str, directory: Path | None, old_dir: Path | None) -> Path:
    """A run's directory from ``orch COMMAND RUN_ID [SWEEP]`` (or the deprecated --dir)."""
    from ..runs import rundir

    directory = renamed(directory, old_dir, "SWEEP", "--dir",
                        use=f"orch {command} RUN_ID SWEEP")
    try:
        return rundir.find_run(run_id, directory)
    except UserError as exc:  # its message predates the positional SWEEP
        raise UserError(str(exc).replace("with --dir", "after RUN_ID")) from None


# --- sweep directories and run tables ------------------------------------------------------


def sweep_dir(path: Path) -> Path:
    from ..runs import rundir

    if not path.is_dir():
        raise UserError(f"{path}: no such sweep directory")
    if not rundir.run_dirs(path):
        raise UserError(f"{path}: not a sweep directory (no <run-id>/run.json inside)")
    return path.resolve()


def schedulers(d: Path) -> list[str]:
    from ..runs import rundir

    found = set()
    for rdir in rundir.run_dirs(d):
        record = rundir.read_record(rdir)
        if record is not None:
            found.add(record.scheduler)
    return sorted(found)


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_event(run, record) -> None:
    from rich.markup import escape

    style = STATE_STYLE.get(record.state, "")
    job = f" job {record.job_id}" if record.job_id else ""
    # A reason quotes what a rank printed, brackets and all ("[/__w/.../pair.cc:152]"), which
    # rich would read as markup: escaped, it is printed as written.
    reason = f": {record.reason.splitlines()[0]}" if record.reason else ""
    err_console.print(f"  {escape(run.run_id + job)} [{style}]{record.state}[/]{escape(reason)}",
                      highlight=False)


def print_runs(recs: list[dict]) -> None:
    from rich.table import Table

    from ..results.runs import co_tenant_ids
    from ..spec.api import group_names

    if not recs:
        out_console.print("no runs")
        return
    # The configuration's keys (spec.api's GROUP fields), those that differ between the runs.
    cols = ["mode", "model", *(k for k in group_names() if k not in ("mode", "model"))]
    multi = {k for k in cols if len({json.dumps(r.get(k), sort_keys=True) for r in recs}) > 1}
    table = Table(box=None, header_style="bold")
    for c in cols:
        if c in multi:
            table.add_column(c)
    # Ranks per node a dimension: show it, and which run each speedup is relative to.
    per_node = len({r.get("tasks_per_node") for r in recs}) > 1
    sizes = ("nodes", "tasks/node", "ranks") if per_node else ("nodes", "ranks")
    tail = ("baseline",) if per_node else ()
    # Any run retried: how each of its attempts ended (the numbers are the last attempt's).
    retried = any("→" in str(r.get("attempts") or "") for r in recs)
    # Any run that shared a node with another (--pack-shared): how many, beside its numbers.
    shared = any(co_tenant_ids(r.get("co_tenants")) for r in recs)
    # samples/s without input I/O (DLE's compute_ips) beside the total, where a run has it.
    compute = any(r.get("samples_per_s_compute") is not None for r in recs)
    # The field's figures (results.workload) where a run has them: tokens, FLOPs, memory.
    work = _workload_cells(recs)
    for c in (*sizes, "samples/s", *(("compute samples/s",) if compute else ()),
              *(work[0] if work else ()), "speedup",
              "efficiency", *tail, "fabric", "state",
              *(("attempts",) if retried else ()), *(("shared with",) if shared else ()),
              "run"):
        table.add_column(c, justify="right" if c in ("nodes", "tasks/node", "ranks",
                                                    "samples/s", "compute samples/s",
                                                    "tokens/s", "tokens/s/device",
                                                    "model FLOP/s/device", "MFU",
                                                    "peak mem/rank",
                                                    "speedup", "efficiency",
                                                    "baseline") else "left")
    for r in sorted(recs, key=lambda r: (r["mode"], r["model"], r["partition"], r["ranks"],
                                         r["nodes"])):
        rate = r.get("samples_per_s")
        rate_s = "-" if rate is None else f"{rate:,.0f} ± {r.get('samples_per_s_std') or 0:,.0f}"
        if rate is not None and r.get("throughput_from") == "epoch steps":  # analyze.FROM_EPOCHS
            rate_s += " (epochs)"
        style = STATE_STYLE.get(r["state"], "")
        row = [str(r.get(c)) if c != "options" else ",".join(f"{k}={v}" for k, v in
                                                            r[c].items())
               for c in cols if c in multi]
        base = r.get("baseline_ranks")
        row += [str(r["nodes"]), *([str(r.get("tasks_per_node"))] if per_node else []),
                str(r["ranks"]), rate_s,
                *([fmt(r.get("samples_per_s_compute"), ",.0f")] if compute else []),
                *(work[1](r) if work else []),
                fmt(r.get("speedup"), ".2f"),
                fmt(r.get("efficiency"), ".0%"),
                *([f"{int(base)} rank{'s' if base != 1 else ''}" if base is not None
                   else "-"] if per_node else []),
                _fabric_cell(r), f"[{style}]{r['state']}[/]",
                *([str(r.get("attempts") or "-")] if retried else []),
                *([_shared_cell(co_tenant_ids(r.get("co_tenants")))] if shared else []),
                r["run_id"]]
        table.add_row(*row)
    out_console.print(table)


def _workload_cells(recs: list[dict]):
    """(column names, row -> cells) of tokens/s, model FLOP/s and MFU per device and peak
    memory per rank, the columns the runs have; None where none has any."""
    from ..report.fmt import flops, gib

    cols = [("tokens/s", "tokens_per_s", lambda v: f"{v:,.0f}"),
            ("tokens/s/device", "tokens_per_s_per_device", lambda v: f"{v:,.0f}"),
            ("model FLOP/s/device", "model_flops_per_s_per_device", flops),
            ("MFU", "mfu", lambda v: f"{v:.1%}"),
            ("peak mem/rank", "peak_memory_bytes", gib)]
    if not any(r.get("flops_per_sample") is not None or r.get("tokens_per_sample") is not None
               for r in recs):
        return None
    keep = [c for c in cols if c[0] == "MFU" or any(r.get(c[1]) is not None for r in recs)]
    return ([c[0] for c in keep],
            lambda r: [fmt_with(r.get(key), f) for _, key, f in keep])


def fmt_with(value, f) -> str:
    return "-" if value is None else f(value)


def _shared_cell(co: list[str]) -> str:
    """How many runs shared this one's node(s)."""
    return f"[yellow]{len(co)} run{'s' if len(co) != 1 else ''}[/]" if co else "-"


FABRIC_STYLE = {"verified": "green", "mismatch": "bold red", "unverified": "yellow"}


def _fabric_cell(r: dict) -> str:
    verdict = r.get("fabric")
    if not verdict:
        return "-"
    where = f" {r['fabric_iface']}" if r.get("fabric_iface") else ""
    return f"[{FABRIC_STYLE.get(verdict, '')}]{verdict}{where}[/]"


def print_fabric_mismatches(recs: list[dict]) -> None:
    """At the end of a sweep, loudly: runs whose bytes did not cross the declared fabric."""
    bad = [r for r in recs if r.get("fabric") == "mismatch"]
    if not bad:
        return
    err_console.print(f"[bold red]FABRIC MISMATCH in {len(bad)} run(s): their ranks did not use "
                      "the fabric their partition declares[/]")
    for r in bad:
        err_console.print(f"  [red]{r['run_id']}[/] (partition {r['partition']}, "
                          f"{r['interconnect']}): {r.get('fabric_reason')}")
