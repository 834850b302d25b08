"""Study files: a sweep written down (``studies/<name>.yaml``), checked into git, run with
``orch sweep --study FILE``.

Every command-line dimension of ``orch sweep`` is a list here (nodes, tasks_per_node, modes,
models, batch_sizes, partitions, options, prefetch), crossed by default; ``zip`` names groups
of dimensions that advance together instead (``zip: [[nodes, tasks_per_node]]`` with
``nodes: [1, 1, 2]`` and ``tasks_per_node: [1, 2, 2]`` is three layouts, not nine);
``per_mode`` gives one mode its own options, models or batch sizes. The pydantic model below is
the published JSON schema (``orch study schema``); every error names the file, the line, the
field and the fix (site.py's machinery), before anything is written or submitted.

A study becomes one SweepSpec per (mode, zipped point), each expanded by ``sweep.expand``;
the runs are the union in order, without duplicates. Command-line flags replace the study's
value of the same dimension. Each run's provenance.json records the study (name, file,
sha256, content), and the result set has a ``study`` column.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from .. import modes
from ..errors import UserError
from ..resources import data_dir
from ..site import Site
from ..spec.api import Run
from ..spec.schema import Count, Name, OptionLists, SweepSpec, study_fields
from ..spec.settings import OPTIONS_DOC, STUDY_SETTINGS, ZIPPABLE
from ..yamlconf import format_validation_error, location, read_text, read_yaml
from . import sweep


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PerMode(_Strict):
    """What one mode does differently from the study's common dimensions."""

    options: OptionLists = Field(default_factory=dict, description="this mode's options (each "
                                 "a list: a dimension), replacing the common ones of that name")
    models: list[Name] | None = Field(None, min_length=1, description="this mode's models")
    batch_sizes: list[Count] | None = Field(None, min_length=1,
                                            description="this mode's batch sizes")


class _StudyHead(_Strict):
    """A sweep as a file: its dimensions (lists, crossed unless zipped) and constants."""

    name: Name = Field(description="the study's name (the file's stem for shipped studies)")
    description: str = Field("", description="what the study measures and where it comes from")
    site: Name | None = Field(None, description="default site (orch sweep --site overrides)")


# The sweep settings' fields come from their one declaration (spec.settings); what only a study
# has (its name, per-mode overrides, zip groups) is declared here.
Study = create_model(
    "Study", __base__=_StudyHead, __module__=__name__, __doc__=_StudyHead.__doc__,
    **study_fields(),
    options=(OptionLists, Field(default_factory=dict, description=OPTIONS_DOC)),
    per_mode=(dict[Name, PerMode], Field(default_factory=dict, description="mode name -> its "
                                         "own options/models/batch sizes")),
    zip=(list[Annotated[list[Name], Field(min_length=2)]], Field(
        default_factory=list, description="groups of dimensions (of: " + ", ".join(ZIPPABLE)
        + ") whose lists have one length and advance together instead of being crossed")),
)


@dataclass(frozen=True)
class LoadedStudy:
    study: Study
    path: Path
    text: str
    root: yaml.Node | None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    def provenance(self) -> dict[str, Any]:
        """What every run's provenance.json records of the study that produced it."""
        return {"name": self.study.name, "file": str(self.path), "sha256": self.sha256,
                "content": self.text}

    def at(self, *loc: Any) -> str:
        """``file:line`` of a field of the file."""
        return location(self.path, self.root, list(loc))


def schema() -> dict[str, Any]:
    """The published JSON schema of study files."""
    out = Study.model_json_schema()
    out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    out["title"] = "orch study"
    return out


def studies_dir() -> Path:
    return data_dir("studies")


def available() -> dict[str, Path]:
    try:
        return {p.stem: p for p in sorted(studies_dir().glob("*.yaml"))}
    except FileNotFoundError:
        return {}


def resolve(name_or_path: str) -> Path:
    """A shipped study's name (studies/) or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise UserError(f"study file {path} does not exist")
        return path
    shipped = available()
    if name_or_path in shipped:
        return shipped[name_or_path]
    raise UserError(f"unknown study '{name_or_path}'; valid: {', '.join(shipped) or '(none)'} "
                    "(or give a path to a study YAML file)")


def _duplicate_keys(path: Path, node: yaml.Node | None, trail: tuple = ()) -> None:
    """YAML lets a mapping repeat a key (the last one wins, silently): refuse it."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else repr(key.value)
            if name in seen:
                field = ".".join(map(str, (*trail, name)))
                raise UserError(f"{path}:{key.start_mark.line + 1}: {field}: duplicate key "
                                f"(first at line {seen[name]}); keep one")
            seen[name] = key.start_mark.line + 1
            _duplicate_keys(path, value, (*trail, name))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _duplicate_keys(path, item, (*trail, i))


def load(name_or_path: str) -> LoadedStudy:
    """Read and validate a study file's shape; errors say file:line, field, fix."""
    path = resolve(name_or_path)
    text = read_text(path, "study")
    data, root = read_yaml(path, "study", "name, description, nodes, modes…")
    _duplicate_keys(path, root)
    try:
        study = Study.model_validate(data)
    except ValidationError as exc:
        lines = format_validation_error(path, root, exc, Study, "study").splitlines()[1:]
        raise UserError("\n".join(lines)) from None
    loaded = LoadedStudy(study, path, text, root)
    _check_zip(loaded)
    return loaded


def _check_zip(ls: LoadedStudy) -> None:
    s, used = ls.study, {}
    for g, group in enumerate(s.zip):
        for i, dim in enumerate(group):
            if dim not in ZIPPABLE:
                raise UserError(f"{ls.at('zip', g, i)}: zip[{g}][{i}]: '{dim}' is not a "
                                f"dimension that can be zipped; valid: {', '.join(ZIPPABLE)}")
            if dim in used:
                raise UserError(f"{ls.at('zip', g, i)}: zip[{g}][{i}]: '{dim}' is already in "
                                f"zip group {used[dim]}; a dimension is in one group at most")
            used[dim] = g
            if getattr(s, dim) is None:
                raise UserError(f"{ls.at('zip', g, i)}: zip[{g}][{i}]: '{dim}' is not given "
                                f"in the study; give it as a list")
    for g, group in enumerate(s.zip):
        lengths = {dim: len(getattr(s, dim)) for dim in group}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{d} has {n}" for d, n in lengths.items())
            raise UserError(f"{ls.at('zip', g)}: zip[{g}]: zipped lists must have one length "
                            f"({shown}); make them equal or cross them (drop the group)")


# --- from a study to runs ------------------------------------------------------------------


def _opt_text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def locator(ls: LoadedStudy, from_cli: set[str], cli_options: set[str],
            mode: str | None = None) -> sweep.Where:
    """sweep.validate's ``where`` for a study: a setting's value located at its file:line and
    path (``nodes[1]``, ``per_mode.tf-ps.options.servers[0]``); a setting given on the command
    line is named by its flag. ``mode``: the mode whose per_mode values a spec holds."""
    def where(name: str, value: Any = None, key: str | None = None) -> str:
        if name in from_cli or (name == "options" and key in cli_options):
            return sweep.cli_where(name, value, key)
        path = _path_in_file(ls.study, name, value, key, mode)
        return f"{ls.at(*path)}: {_dotted(path)}"
    return where


def _path_in_file(s: Study, name: str, value: Any, key: str | None,
                  mode: str | None) -> tuple:
    """Where in the study a setting's value is written: its list item where it is one."""
    per = s.per_mode.get(mode) if mode else None
    if name == "options":
        mine = per is not None and key in per.options
        base: tuple = ("per_mode", mode, "options", key) if mine else ("options", key)
        values: Any = [_opt_text(v) for v in (per.options[key] if mine
                                               else s.options.get(key, []))]
    elif per is not None and name in ("models", "batch_sizes") and getattr(per, name):
        base, values = ("per_mode", mode, name), getattr(per, name)
    else:
        base, values = (name,), getattr(s, name, None)
    if value is not None and isinstance(values, list) and value in values:
        return (*base, values.index(value))
    return base


def _dotted(path: tuple) -> str:
    """("per_mode", "tf-ps", "options", "servers", 0) → per_mode.tf-ps.options.servers[0]."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _check_per_mode(ls: LoadedStudy, mode_names: tuple[str, ...], from_cli: set[str]) -> None:
    """per_mode names the study's modes, and only options its mode has (what the sweep
    settings are is checked by sweep.validate, located by :func:`locator`)."""
    for mode_name, per in ls.study.per_mode.items():
        if mode_name not in mode_names:
            if "modes" in from_cli:
                continue  # --mode chose other modes: this mode's overrides are not used
            raise UserError(f"{ls.at('per_mode', mode_name)}: per_mode.{mode_name}: not one of "
                            f"the study's modes ({', '.join(mode_names)}); fix the name or add "
                            "it to modes")
        for name in per.options:
            try:
                modes.get(mode_name).option(name)
            except UserError as exc:
                raise UserError(f"{ls.at('per_mode', mode_name, 'options', name)}: "
                                f"per_mode.{mode_name}.options.{name}: {exc}") from None


def spec_fields(study: Study) -> dict[str, Any]:
    """The study as SweepSpec keyword arguments (lists as tuples, option values as text)."""
    out: dict[str, Any] = {}
    for name in (*STUDY_SETTINGS, "options"):
        value = getattr(study, name)
        if name == "options":
            value = {k: tuple(_opt_text(v) for v in vs) for k, vs in value.items()}
        elif isinstance(value, list):
            value = tuple(value)
        out[name] = value
    if out["partitions"] is None:
        out["partitions"] = (None,)
    return out


def specs(ls: LoadedStudy, site: Site, overrides: dict[str, Any] | None = None,
          *, dry_run: bool = False) -> list[SweepSpec]:
    """One SweepSpec per (mode, point of the zipped groups). ``overrides``: SweepSpec fields
    given on the command line; they replace the study's (a zip group loses a dimension the
    command line gave); ``options`` replace the study's options of the same names only.

    The study as a whole is validated first (every mode's common values, located in the
    file); each spec holds the options of its own mode only."""
    overrides = dict(overrides or {})
    cli_options = overrides.pop("options", {})  # per option name, over the file's and per_mode
    fields = {**spec_fields(ls.study), **overrides}
    fields["options"] = {**fields["options"], **cli_options}
    from_cli = set(overrides)
    sweep.validate(SweepSpec(**fields), site, locator(ls, from_cli, set(cli_options)),
                   dry_run=dry_run)
    _check_per_mode(ls, fields["modes"], from_cli)
    groups = [[d for d in g if d not in overrides] for g in ls.study.zip]
    groups = [g for g in groups if g]
    out = []
    for mode in fields["modes"]:
        base = _mode_fields(ls.study, fields, mode, cli_options, from_cli)
        indexes = [range(len(fields[g[0]])) for g in groups]
        for point in itertools.product(*indexes):
            spec = dict(base)
            for group, i in zip(groups, point, strict=True):
                for dim in group:
                    spec[dim] = (fields[dim][i],)
            out.append(SweepSpec(**spec))
    return out


def _mode_fields(study: Study, fields: dict[str, Any], mode: str,
                 cli_options: dict[str, tuple[str, ...]], from_cli: set[str]) -> dict[str, Any]:
    """One mode's SweepSpec fields: its per_mode values over the common ones, and only the
    options it has (the others are the other modes')."""
    base = {**fields, "modes": (mode,)}
    per = study.per_mode.get(mode)
    if per is not None:
        base["options"] = {**base["options"], **{k: tuple(_opt_text(v) for v in vs)
                                                 for k, vs in per.options.items()},
                           **cli_options}
        if per.models and "models" not in from_cli:
            base["models"] = tuple(per.models)
        if per.batch_sizes and "batch_sizes" not in from_cli:
            base["batch_sizes"] = tuple(per.batch_sizes)
    has = {o.name for o in modes.get(mode).options}
    base["options"] = {k: v for k, v in base["options"].items() if k in has}
    return base


def expand(ls: LoadedStudy, site: Site, overrides: dict[str, Any] | None = None,
           *, dry_run: bool = False) -> list[Run]:
    """The study's runs in order, each once. An error no check located names the file.
    ``dry_run``: a data set not made yet is no error (sweep.validate)."""
    try:
        return _expand(ls, site, dict(overrides or {}), dry_run)
    except UserError as exc:
        if str(exc).startswith(str(ls.path)):
            raise
        raise UserError(f"{ls.path}: {exc}") from None


def _expand(ls: LoadedStudy, site: Site, overrides: dict[str, Any], dry_run: bool
            ) -> list[Run]:
    from_cli, cli_options = set(overrides) - {"options"}, set(overrides.get("options", {}))
    runs: dict[str, Run] = {}
    for spec in specs(ls, site, overrides, dry_run=dry_run):
        where = locator(ls, from_cli, cli_options, spec.modes[0])
        for run in sweep.expand(spec, site, where, dry_run=dry_run):
            runs.setdefault(run.run_id, run)
    return list(runs.values())
