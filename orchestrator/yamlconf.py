"""YAML config files that answer with ``file:line``: site configs, framework environments,
image specs and studies are all read here.

A file is read as UTF-8 only, parsed with duplicate keys refused, checked for control
characters, and composed a second time into a node tree that keeps every key's line. A
pydantic error then becomes one line per problem: ``file:line: field.path: message (got
value)``, the field path walked down the node tree to the nearest line that exists.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .errors import CONTROL, UserError

# Pydantic's own step names that appear in an error location inside a union (not fields).
_PYDANTIC_STEPS = ("function-after",)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently: a duplicated ``nodes:`` would hide the first value)."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False):
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}' (first given on line {seen[key]})",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def control_chars(data: Any, loc: tuple[Any, ...] = ()) -> tuple[tuple[Any, ...], str] | None:
    """The first string (key or value) holding a control character: its location and a repr."""
    if isinstance(data, str):
        return (loc, repr(data)) if CONTROL.search(data) else None
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and CONTROL.search(key):
                return (*loc, key), repr(key)
            found = control_chars(value, (*loc, key))
            if found:
                return found
    if isinstance(data, list):
        for i, value in enumerate(data):
            found = control_chars(value, (*loc, i))
            if found:
                return found
    return None


def read_text(path: Path, what: str) -> str:
    """A file's text, UTF-8 only; a clear error otherwise (never a traceback)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        hint = " (it looks like UTF-16: save it as UTF-8)" if raw[:2] in (b"\xff\xfe",
                                                                          b"\xfe\xff") else ""
        raise UserError(f"{path}:{line}: the {what} is not UTF-8 text{hint}") from None


def read_yaml(path: Path, what: str, fields: str) -> tuple[dict[str, Any], yaml.Node | None]:
    """A YAML mapping and its composed node tree (for line numbers); errors say file:line.
    Duplicate keys and control characters in any key or value are refused."""
    text = read_text(path, what)
    try:
        data = yaml.load(text, Loader=_StrictLoader)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:
        raise UserError(f"{path}: the {what} is nested too deeply to be a {what}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a {what} is a YAML mapping ({fields})")
    bad = control_chars(data)
    if bad:
        loc, shown = bad
        raise UserError(f"{location(path, root, list(loc))}: {dotted(list(loc)) or '(top level)'}"
                        f": control characters (newline, tab, NUL…) are not allowed "
                        f"(got {shown})")
    return data, root


def format_validation_error(path: Path, root: yaml.Node | None, exc: ValidationError,
                            model: type[BaseModel], what: str,
                            union_tags: Mapping[str, str] | None = None) -> str:
    """One line per problem: ``file:line: field.path: message (got value)``.

    ``union_tags``: the tags of the model's discriminated unions, which pydantic puts in an
    error's location but are no field (left out of the path) -> the message for a value that is
    not of that member's type ('' keeps pydantic's own).
    """
    tags = dict(union_tags or {})
    lines = []
    for err in exc.errors():
        loc = [part for part in err["loc"] if part not in _PYDANTIC_STEPS and part not in tags]
        lines.append(f"{location(path, root, loc)}: {dotted(loc) or '(top level)'}: "
                     f"{_message(err, loc, model, tags)}{_shown(err)}")
    return f"invalid {what}\n" + "\n".join(lines)


def _message(err: Any, loc: list[Any], model: type[BaseModel], tags: dict[str, str]) -> str:
    """A pydantic error's message, said the way a config file's author needs it."""
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "extra_forbidden":
        return f"unknown field; valid fields here: {', '.join(_valid_fields(loc[:-1], model))}"
    if err["type"] == "model_type":
        for tag, message in tags.items():
            if message and tag in err["loc"]:
                return message
    return err["msg"]


def _shown(err: Any) -> str:
    got = err.get("input")
    return f" (got {got!r})" if err["type"] != "missing" and _scalar(got) else ""


def location(path: Path, root: yaml.Node | None, loc: list[Any]) -> str:
    """``file:line`` of the YAML node a field path leads to (or its nearest ancestor)."""
    line = _line_of(root, loc)
    return f"{path}:{line}" if line else str(path)


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


def dotted(loc: list[Any]) -> str:
    """A field path as a reader writes it: ``partitions[0].sbatch.time``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _line_of(node: yaml.Node | None, loc: list[Any]) -> int | None:
    """Walk the composed YAML tree along a pydantic error location to the nearest line."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
            key = next((k for k, v in node.value if k.value == part), None)
            if match is None:
                return line
            line = key.start_mark.line + 1
            node = match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return line
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _valid_fields(loc: list[Any], model: type[BaseModel]) -> list[str]:
    """Field names allowed at a location, to list them when a field is misspelt."""
    skip_key = False
    for part in loc:
        if isinstance(part, int) or skip_key:
            skip_key = False
            continue
        field = model.model_fields.get(part)
        if field is None:
            return sorted(model.model_fields)
        nested = _model_in(field.annotation)
        if nested is None:
            break
        skip_key = getattr(field.annotation, "__origin__", None) is dict
        model = nested
    return sorted(model.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None
