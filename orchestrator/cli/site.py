"""``orch site list|show|validate|schema``: the site configs."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..errors import UserError
from ._common import group, out_console

app = group("List, show, validate site configs; print their JSON schema.")


@app.command("list")
def site_list() -> None:
    """Sites shipped in site-configs/."""
    from rich.table import Table

    from .. import site as sitemod

    table = Table("site", "scheduler", "partitions", "description", box=None)
    for name, path in sitemod.available().items():
        try:
            s, _ = sitemod.load(str(path))
            parts = ", ".join(f"{p.name} ({p.interconnect}, {p.nodes} nodes)" for p in
                              s.partitions)
            table.add_row(name, s.scheduler, parts, s.description)
        except UserError as exc:
            table.add_row(name, "?", "[red]invalid[/]", str(exc).splitlines()[-1])
    out_console.print(table)


@app.command("show")
def site_show(name: Annotated[str, typer.Argument(help="Site name or YAML path.")]) -> None:
    """The validated site config, with defaults filled in."""
    from .. import site as sitemod

    s, path = sitemod.load(name)
    out_console.print(f"# {path}", highlight=False)
    import yaml

    out_console.print(yaml.safe_dump(s.model_dump(mode="json"), sort_keys=False),
                      markup=False, highlight=False)


@app.command("validate")
def site_validate(path: Annotated[str, typer.Argument(help="Site YAML file.")]) -> None:
    """Validate a site config file; errors give file:line, field and the fix."""
    from .. import site as sitemod

    s, p = sitemod.load(path)
    out_console.print(f"{p}: valid site '{s.name}' ({s.scheduler}, "
                      f"{len(s.partitions)} partition(s))")


@app.command("schema")
def site_schema() -> None:
    """The JSON schema of site config files."""
    from .. import site as sitemod

    sys.stdout.write(json.dumps(sitemod.schema(), indent=2) + "\n")


@app.command("detect")
def site_detect(
    name: Annotated[str, typer.Option("--name", help="Site name.")] = "detected",
    out: Annotated[str | None, typer.Option("--out", "-o", help="File to write; default "
                                            "site-configs/<name>.yaml; '-' prints it.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    probe: Annotated[bool, typer.Option("--probe/--no-probe", help="Run a small probe job on "
                                        "one node of each partition (interfaces, InfiniBand).")]
    = True,
) -> None:
    """Draft a site config from the live Slurm (sinfo + a probe job per partition)."""
    from pathlib import Path

    from .. import site as sitemod
    from .. import sitedetect

    path = None if out == "-" else Path(out) if out else sitemod.site_dir() / f"{name}.yaml"
    if path is not None and path.exists() and not force:
        raise UserError(f"{path} exists; use --force to overwrite it")
    try:
        text = sitedetect.detect(name, probe_jobs=probe)
    except sitedetect.NoSlurm as exc:
        sys.stderr.write(f"orch site detect: no Slurm here ({exc})\n")
        raise typer.Exit(2) from None
    if path is None:
        sys.stdout.write(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    out_console.print(f"{path}: draft site '{name}' written and valid; check the values marked "
                      "'guessed'", highlight=False)
