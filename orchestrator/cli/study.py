"""``orch study schema|validate|list``: study files (studies/<name>.yaml, a sweep written down)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..errors import UserError
from ._common import group, out_console

app = group("Study files (a sweep as a file): list, validate them; print their JSON schema.")


@app.command("list")
def study_list() -> None:
    """Studies shipped in studies/."""
    from rich.table import Table

    from ..plan import study as studymod

    table = Table("study", "description", box=None)
    for name, path in studymod.available().items():
        try:
            table.add_row(name, studymod.load(str(path)).study.description)
        except UserError as exc:
            table.add_row(name, f"[red]invalid[/]: {str(exc).splitlines()[0]}")
    out_console.print(table)


@app.command("validate")
def study_validate(
    path: Annotated[str, typer.Argument(help="Study YAML file or shipped study name.")],
    site: Annotated[str | None, typer.Option(help="Site to check it against (partitions, "
                                             "node counts); default: the study's, else "
                                             "local.")] = None,
) -> None:
    """Validate a study file against a site; errors give file:line, field and the fix."""
    from .. import site as sitemod
    from ..plan import study as studymod

    ls = studymod.load(path)
    site_obj, _ = sitemod.load(site or ls.study.site or "local")
    runs = studymod.expand(ls, site_obj, dry_run=True)  # the file, not a data set made yet
    out_console.print(f"{ls.path}: valid study '{ls.study.name}' on site '{site_obj.name}': "
                      f"{len(runs)} run(s), sha256 {ls.sha256[:12]}", highlight=False)


@app.command("schema")
def study_schema() -> None:
    """The JSON schema of study files."""
    from ..plan import study as studymod

    sys.stdout.write(json.dumps(studymod.schema(), indent=2) + "\n")
