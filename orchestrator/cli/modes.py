"""``orch modes``: every distributed mode with its framework environment, launchers and options
(from the modes' descriptors, orchestrator.modes.catalogue)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..errors import UserError
from ._common import out_console


def modes_cmd(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="[MODE]...", help="Only these modes, each with every option in full.")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table, json or markdown.")]
    = "table",
) -> None:
    """Every distributed mode: its framework environment, launchers and options.

    A mode is chosen with orch sweep --mode NAME and its options with --option NAME=VALUE
    (several values: a sweep dimension). Give mode names to see their options in full.
    """
    from ..modes import catalogue, get

    if format not in ("table", "json", "markdown"):
        raise UserError(f"--format {format}: valid: table, json, markdown")
    for name in names or ():
        get(name)  # an unknown mode: one line listing the valid ones, exit 2
    records = [r for r in catalogue.records() if not names or r["name"] in names]
    if format == "json":
        sys.stdout.write(json.dumps(records, indent=2) + "\n")
    elif format == "markdown":
        sys.stdout.write(catalogue.modes_table() + "\n" + catalogue.shared_table())
    elif names:
        for record in records:
            _print_mode(record)
    else:
        _print_table(records)


def _options_text(record: dict) -> str:
    return ", ".join(o["name"] for o in record["options"]) or "-"


def _print_table(records: list[dict]) -> None:
    from rich.table import Table

    table = Table("mode", "framework env", "launchers", "what", "options", box=None,
                  header_style="bold")
    for r in records:
        table.add_row(r["name"], r["framework_env"], ", ".join(r["launchers"]),
                      r["description"], _options_text(r))
    out_console.print(table, markup=False, highlight=False)
    out_console.print("orch modes MODE: a mode's options in full; orch sweep --mode MODE "
                      "--option NAME=VALUE[,VALUE] runs it.", markup=False, highlight=False)


def _print_mode(record: dict) -> None:
    from rich.table import Table

    from ..modes import catalogue, get

    out_console.print(f"{record['name']}: {record['description']}", markup=False,
                      highlight=False)
    out_console.print(f"  framework env {record['framework_env']}, launchers "
                      f"{', '.join(record['launchers'])}, pattern {record['pattern']}, "
                      f"overlap {record['overlap']}", markup=False, highlight=False)
    table = Table("option", "values (default)", "what", box=None, header_style="bold",
                  padding=(0, 1))
    for option in get(record["name"]).options:
        table.add_row(option.name, catalogue.values_text(option), option.help)
    out_console.print(table, markup=False, highlight=False)
