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
def site_list(fmt: Annotated[str, typer.Option("--format", help="table or json.")] = "table"
              ) -> None:
    """Every site config on the search path, where it comes from and which one a name finds.

    A name in several directories is found in the first (its other files are marked
    shadowed); an invalid file is listed with its first problem, and only fails a command
    that uses it."""
    from .. import site as sitemod

    if fmt not in ("table", "json"):
        raise UserError(f"--format '{fmt}': use table or json")
    rows = [_describe(e) for e in sitemod.entries()]
    if fmt == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    from rich.table import Table

    table = Table("site", "source", box=None)
    table.add_column("file", no_wrap=True)
    for col in ("scheduler", "partitions", "note"):
        table.add_column(col)
    sources = {r["file"]: r["source"] for r in rows}
    for r in rows:
        # the winner is listed above with its file; its source is enough to point at it
        note = (f"[yellow]shadowed[/] by {sources[r['shadowed_by']]}" if r["shadowed_by"] else
                _invalid(r) if r["problem"] else r["description"])
        table.add_row(r["name"], r["source"], r["file"], r["scheduler"] or "?",
                      r["partitions"], note)
    out_console.print(table)
    out_console.print("search path, first match wins:", highlight=False)
    for d in sitemod.search_path():
        missing = "" if d.path.is_dir() else "  (no such directory)"
        out_console.print(f"  {d.source:<15} {d.path}{missing}", highlight=False)


def _invalid(row: dict) -> str:
    """An invalid file's note: its problem, located by line (the file is in its own column)."""
    problem = row["problem"]
    if problem.startswith(row["file"] + ":"):
        problem = "line " + problem[len(row["file"]) + 1:]
    return f"[red]invalid[/]: {problem}"


def _describe(entry) -> dict:
    """One site file of the search path as a row: where it is, whether a name finds it, and
    what it holds (or its first located problem, when it does not load)."""
    from .. import site as sitemod

    row = {"name": entry.name, "source": entry.source.source,
           "directory": str(entry.source.path), "file": str(entry.path),
           "shadowed_by": str(entry.shadowed_by) if entry.shadowed_by else None,
           "scheduler": None, "partitions": "", "description": "", "problem": None}
    try:
        s, _ = sitemod.load(str(entry.path))
    except UserError as exc:
        lines = str(exc).splitlines()
        row["problem"] = next((x for x in lines if x.startswith(str(entry.path))), lines[-1])
        return row
    row.update(scheduler=s.scheduler, description=s.description, partitions=", ".join(
        f"{p.name} ({p.interconnect}, {p.nodes} nodes)" for p in s.partitions))
    return row


@app.command("show")
def site_show(name: Annotated[str, typer.Argument(help="Site name (on the search path: orch "
                                                        "site list) or YAML path.")]) -> None:
    """The validated site config, with defaults filled in, after the file it was read from."""
    from .. import site as sitemod

    s, path = sitemod.load(name)
    out_console.print(f"# {path.resolve()}", highlight=False)
    import yaml

    out_console.print(yaml.safe_dump(s.model_dump(mode="json"), sort_keys=False),
                      markup=False, highlight=False)


@app.command("validate")
def site_validate(path: Annotated[str, typer.Argument(
        help="Site name (on the search path) or YAML file.")]) -> None:
    """Validate a site config; errors give file:line, field and the fix."""
    from .. import site as sitemod

    s, p = sitemod.load(path)
    out_console.print(f"{p.resolve()}: valid site '{s.name}' ({s.scheduler}, "
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
                                            "~/.config/orch/sites/<name>.yaml (the user's "
                                            "directory of the site search path); '-' prints "
                                            "it.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
    probe: Annotated[bool, typer.Option("--probe/--no-probe", help="Run a small probe job on "
                                        "one node of each partition (interfaces, InfiniBand).")]
    = True,
) -> None:
    """Draft a site config from the live Slurm (sinfo + a probe job per partition)."""
    from pathlib import Path

    from ..site import detect as sitedetect

    path = None if out == "-" else Path(out) if out else sitedetect.draft_path(name)
    if path is not None and path.exists() and not force:
        raise UserError(f"{path} exists; choose another --name or --out, or use --force to "
                        f"overwrite it")
    try:
        text = sitedetect.detect(name, probe_jobs=probe)
    except sitedetect.NoSlurm as exc:
        sys.stderr.write(f"orch site detect: no Slurm here ({exc})\n")
        raise typer.Exit(2) from None
    if path is None:
        sys.stdout.write(text)
        return
    sitedetect.write_draft(path, text, force)
    site = _named_as(name, path)
    out_console.print(
        f"{path}: draft site '{name}' written and valid; check the values marked 'guessed', "
        f"then:\n  orch site validate {site}\n  orch sweep --site {site} --nodes 1 --dry-run",
        highlight=False)


def _named_as(name: str, path) -> str:
    """How later commands name a written draft: ``name`` where the search path finds this
    file by it, else its path (shell-quoted: it is printed as a command to copy)."""
    import shlex

    from .. import site as sitemod

    try:
        if sitemod.resolve(name).resolve() == path.resolve():
            return name
    except UserError:
        pass
    return shlex.quote(str(path))
