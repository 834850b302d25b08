"""The modes as plain records and Markdown, from their descriptors alone: what ``orch modes``
prints and what ``scripts/gen-reference`` writes into the README's and the docs' modes tables,
so a new mode folder is listed everywhere without an edit.

An option object that several modes share (the torch modes' run dimensions are one tuple of
:class:`~.base.Option` objects, ``torch_options.RUN_DIMENSIONS``) is listed once, under
"options several modes share", with the modes that take it; the table of modes lists each
mode's own options. Stdlib only and valid Python 3.6, as the rest of this package.
"""

from . import registry


def overlap_text(mode):
    """How the mode's gradient communication meets backward, in words."""
    if mode.overlap_option:
        return f"per run (option {mode.overlap_option})"
    if callable(mode.overlap):
        return "per run (its options)"
    return mode.overlap


def option_record(option):
    return {"name": option.name, "choices": list(option.choices), "default": option.default,
            "minimum": option.minimum if option.numeric and not option.choices else None,
            "help": option.help}


def records():
    """One plain record per mode, sorted by name (``orch modes --format json``)."""
    out = []
    for mode in registry().values():
        out.append({
            "name": mode.name, "framework_env": mode.framework, "library": mode.library,
            "description": mode.description, "launchers": list(mode.launchers),
            "pattern": mode.pattern, "overlap": overlap_text(mode), "trains": mode.trains,
            "epochs": mode.epochs, "options": [option_record(o) for o in mode.options],
        })
    return out


def shared_options():
    """The option objects more than one mode holds, in first-seen order, each with the
    names of its modes: [(option, [mode, ...])]."""
    seen = {}
    for mode in registry().values():
        for option in mode.options:
            seen.setdefault(id(option), (option, []))[1].append(mode.name)
    return [(option, names) for option, names in seen.values() if len(names) > 1]


def values_text(option):
    """``nccl|gloo``, ``no|yes (no)``, ``N >= 1 (26214400)``: what an option takes."""
    if option.choices:
        taken = "|".join(option.choices)
    elif option.numeric:
        taken = f"N >= {option.minimum}"
    else:  # its own syntax, which its help gives
        taken = "TEXT"
    if option.default is None:
        return taken + " (default: see what)" if option.choices else taken
    if len(str(option.default)) > MAX_DEFAULT:  # a long list: its help gives it short
        return taken
    return f"{taken} ({option.default})"


MAX_DEFAULT = 24


def _cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def modes_table():
    """The Markdown table of every mode: framework environment, launchers, what it is, its own
    options (shared ones by name, see :func:`shared_table`)."""
    shared = {id(option) for option, _ in shared_options()}
    lines = ["| mode | framework env | launchers | what | options |", "|---|---|---|---|---|"]
    for mode in registry().values():
        own = [f"`{o.name}`={_cell(values_text(o))}" for o in mode.options
               if id(o) not in shared]
        common = [o.name for o in mode.options if id(o) in shared]
        if common:
            own.append("shared: " + ", ".join(f"`{n}`" for n in common))
        lines.append("| `{}` | `{}` | {} | {} | {} |".format(
            mode.name, mode.framework, ", ".join(mode.launchers), _cell(mode.description),
            "; ".join(own) or "-"))
    return "\n".join(lines) + "\n"


def shared_table():
    """The Markdown table of the options several modes share, with the modes that take them."""
    lines = ["| option | values (default) | modes | what |", "|---|---|---|---|"]
    for option, names in shared_options():
        lines.append("| `{}` | {} | {} | {} |".format(
            option.name, _cell(values_text(option)), ", ".join(names), _cell(option.help)))
    return "\n".join(lines) + "\n"


def options_markdown():
    """Every mode's options in full, one table per mode (the docs' modes reference)."""
    out = []
    for mode in registry().values():
        out += [f"### {mode.name}", "", _cell(mode.description) + ".", "",
                "Framework environment `{}`, launchers {}; communication pattern `{}`, "
                "overlap with backward: `{}`.".format(
                    mode.framework, ", ".join(f"`{n}`" for n in mode.launchers),
                    mode.pattern, overlap_text(mode)), ""]
        if mode.options:
            out += ["| option | values (default) | what |", "|---|---|---|"]
            out += [f"| `{o.name}` | {_cell(values_text(o))} | {_cell(o.help)} |"
                    for o in mode.options]
            out.append("")
    return "\n".join(out)
