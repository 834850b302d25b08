"""``orch models``: the model zoo and each model's parameter count per framework."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..errors import UserError
from ._common import err_console, fmt, out_console


def models(
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
    site: Annotated[str, typer.Option(help="Site whose framework environments count.")]
    = "local",
    catalogue_only: Annotated[bool, typer.Option("--catalogue-only", help="Only the expected "
                                                 "counts; build nothing.")] = False,
) -> None:
    """The model zoo and each model's parameter count, expected and per framework.

    Each framework environment of the site builds every model and counts its parameters (once:
    cached), so the table shows the same network in every framework, or which one differs.
    """
    if format not in ("table", "json"):
        raise UserError(f"--format {format}: valid: table, json")
    from rich.table import Table

    from .. import site as sitemod
    from ..plan import zoo_counts

    s, _ = sitemod.load(site)
    frameworks = () if catalogue_only else zoo_counts.FRAMEWORKS
    recs = zoo_counts.table(s, frameworks, log=lambda m: err_console.print(m, highlight=False))
    if format == "json":
        sys.stdout.write(json.dumps(recs, indent=2) + "\n")
        if not all(r["agree"] for r in recs):
            raise typer.Exit(1)
        return
    table = Table("model", "dataset", "expected", *frameworks, "agree", box=None)
    for r in recs:
        for ds, n in r["params"].items():
            cells = [fmt(r["frameworks"].get(fw, {}).get(ds), ",") for fw in frameworks]
            table.add_row(r["model"], ds, f"{n:,}", *cells,
                          "yes" if r["agree"] else "[red]NO[/]")
    out_console.print(table)
    missing = {fw: why for r in recs for fw, why in r["missing"].items()
               if why != "not implemented in this framework"}
    for fw, why in sorted(missing.items()):
        err_console.print(f"{fw}: {why}", highlight=False)
    if not all(r["agree"] for r in recs):
        raise typer.Exit(1)
