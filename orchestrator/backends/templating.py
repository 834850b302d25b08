"""One Jinja environment for every script orch writes: job scripts, launch scripts, container
wrappers and image recipes.

Templates are compiled once per process (a 1,200-run dry run compiled the same templates 1,200
times before: 90 % of its time). Mode templates live in their mode's folder and are named
``modes/<package>/launch.sh.j2``; the rest live under ``templates/``.

Shell safety: every value that reaches a shell line goes through the ``q`` filter (shlex
quoting) or ``qall`` (a list); StrictUndefined makes a missing value an error, never an empty
string in a script.
"""

from __future__ import annotations

import functools
import shlex

import jinja2

from ..resources import data_dir, package_dir


def quote(value: object) -> str:
    return shlex.quote(str(value))


def quote_all(values: list[object]) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


@functools.cache
def environment() -> jinja2.Environment:
    loader = jinja2.ChoiceLoader([
        jinja2.PrefixLoader({"modes": jinja2.FileSystemLoader(str(package_dir() / "modes"))}),
        jinja2.FileSystemLoader(str(data_dir("templates"))),
    ])
    env = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,  # templates do not change under a running orch: no stat per render
        cache_size=-1,
        # Shell uses "{#" (${#array[@]}): Jinja comments get delimiters shell never has.
        comment_start_string="{##",
        comment_end_string="##}",
    )
    env.filters["q"] = quote
    env.filters["qall"] = quote_all
    return env


def template(name: str) -> jinja2.Template:
    """A compiled template (compiled once per process)."""
    return environment().get_template(name)
