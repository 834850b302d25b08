"""``orch env list|build``: a site's framework environments."""

from __future__ import annotations

from typing import Annotated

import typer

from ._common import err_console, group, out_console

app = group("Framework environments of a site: list them, build them.")


@app.command("list")
def env_list(site: Annotated[str, typer.Option(help="Site name or YAML path.")] = "local") -> None:
    """The site's environments, their Python, where their build is defined, whether built."""
    from rich.table import Table

    from .. import site as sitemod
    from ..site import envs

    s, _ = sitemod.load(site)
    table = Table("environment", "python", "managed by orch", "build from", "built", box=None)
    for name, env in s.environments.items():
        managed = env.build is not None
        table.add_row(name, envs.python_of(env), "yes" if managed else "no",
                      envs.build_source(env),
                      ("yes" if envs.is_built(env) else "[red]no[/]") if managed else "-")
    out_console.print(table)


@app.command("build")
def env_build(
    names: Annotated[list[str] | None, typer.Argument(help="Environments (default: all the "
                                                      "site's buildable ones).")] = None,
    site: Annotated[str, typer.Option(help="Site name or YAML path.")] = "local",
    force: Annotated[bool, typer.Option(help="Rebuild even if up to date.")] = False,
) -> None:
    """Create the environments' venvs (once; a changed description rebuilds)."""
    from .. import site as sitemod
    from ..site import envs

    s, path = sitemod.load(site)
    wanted = names or [n for n, e in s.environments.items() if e.build is not None]
    for name in wanted:
        env = s.environment(name, source=str(path))
        envs.build(name, env, force=force, log=lambda m: err_console.print(m, highlight=False))
