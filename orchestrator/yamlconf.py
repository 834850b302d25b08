"""YAML config files that answer with ``file:line``: site configs, framework environments,
image specs and studies are all read here, and every other file a person hands orch goes
through :func:`read_text` (data manifests, the model's inputs).

A file is read within bounds (:data:`LIMITS`, docs/limits.md): at most so many bytes, as UTF-8
only, lines of at most so many characters; its YAML events are counted before anything is
built (nesting depth, and nodes and characters with every alias expanded: a few hundred bytes
of nested aliases would otherwise expand to billions of nodes). Then it is composed once into a
node tree that keeps every key's line, built with duplicate keys refused, and checked for
control characters. A pydantic error then becomes one line per problem: ``file:line:
field.path: message (got value)``, the field path walked down the node tree to the nearest
line that exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import CONTROL, UserError

M = TypeVar("M", bound=BaseModel)

# Pydantic's own step names that appear in an error location inside a union (not fields).
_PYDANTIC_STEPS = ("function-after",)


class Limits(NamedTuple):
    """How much of a file orch reads before it refuses it (docs/limits.md says why each)."""

    bytes: int = 64 << 10  # the largest shipped config is 3 KB
    line_chars: int = 4096
    depth: int = 32  # a site config nests 4 deep
    nodes: int = 10_000  # aliases expanded; a site config has a few hundred

    @property
    def chars(self) -> int:
        """Scalar characters, aliases expanded: no more than the file itself may hold."""
        return self.bytes


LIMITS = Limits()
# libyaml counts the events in C where it is installed: a refusal in a fraction of a second
# (the pure-Python parser takes seconds over 64 KB on a loaded machine).
_FastLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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


def read_text(path: Path, what: str, limits: Limits = LIMITS) -> str:
    """A file's text, UTF-8 only, within ``limits.bytes`` and ``limits.line_chars``; one
    located line otherwise (never a traceback, never more than the limit read)."""
    raw = _read_bounded(path, what, limits.bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        hint = " (it looks like UTF-16: save it as UTF-8)" if raw[:2] in (b"\xff\xfe",
                                                                          b"\xfe\xff") else ""
        raise UserError(f"{path}:{line}: the {what} is not UTF-8 text{hint}") from None
    _check_lines(path, what, text, limits.line_chars)
    return text


def _read_bounded(path: Path, what: str, most: int) -> bytes:
    """At most ``most`` bytes of the file; refused if it holds more (read no further: the
    file may be /dev/zero or gigabytes)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(most + 1)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(raw) > most:
        raise UserError(f"{path}: larger than {_size(most)}, the most a {what} may be; is it "
                        f"the right file? (docs/limits.md)")
    return raw


def _check_lines(path: Path, what: str, text: str, most: int) -> None:
    if len(text) <= most:
        return
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > most:
            raise UserError(f"{path}:{number}: a line longer than {most:,} characters, the most "
                            f"a {what} line may be; break it (YAML folds long text with '>-') "
                            f"(docs/limits.md)")


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n >> 10} KiB"


def read_json(path: Path, what: str, limits: Limits = LIMITS) -> Any:
    """A JSON file's value, read within ``limits`` (bytes, line length, nesting depth)."""
    text = read_text(path, what, limits)
    try:
        data = json.loads(text)
        deep = _depth(data) > limits.depth
    except RecursionError:
        deep = True
    except ValueError as exc:
        line = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise UserError(f"{path}{line}: the {what} is not valid JSON: "
                        f"{getattr(exc, 'msg', exc)}") from None
    if deep:
        _refuse_depth(path, what, None, limits.depth)
    return data


def _depth(value: Any) -> int:
    """How deep lists and mappings nest in ``value`` (a scalar: 0)."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _refuse_depth(path: Path, what: str, line: int | None, most: int) -> None:
    at = f":{line}" if line else ""
    raise UserError(f"{path}{at}: lists and mappings nested more than {most} deep, the most a "
                    f"{what} may nest; flatten it (docs/limits.md)") from None


def check_events(text: str, path: Path, what: str, limits: Limits = LIMITS) -> None:
    """Refuse YAML that nests deeper than ``limits.depth`` or that, with every alias expanded,
    holds more than ``limits.nodes`` nodes or ``limits.chars`` scalar characters; counted on
    the parser's events, before any node is built. A syntax error is left to the composer,
    which says it with its own words; where libyaml stops on one, PyYAML's own parser counts
    again (the two differ at the edges, and the composer is PyYAML's)."""
    for loader in dict.fromkeys((_FastLoader, yaml.SafeLoader)):
        try:
            _count_events(yaml.parse(text, Loader=loader), path, what, limits)
            return
        except yaml.YAMLError:
            continue


def _count_events(events: Iterator[yaml.Event], path: Path, what: str, limits: Limits
                  ) -> None:
    """:func:`check_events` on one parser's events. Each anchor's expanded size is kept, so
    an alias costs one step however much it stands for."""
    sizes: dict[str, tuple[int, int]] = {}
    open_at: list[tuple[str | None, int, int]] = []  # per open collection: anchor, counts then
    nodes = chars = 0
    for event in events:
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_at) >= limits.depth:
                _refuse_depth(path, what, event.start_mark.line + 1, limits.depth)
            open_at.append((event.anchor, nodes, chars))
            nodes += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, nodes_then, chars_then = open_at.pop()
            if anchor is not None:
                sizes[anchor] = (nodes - nodes_then, chars - chars_then)
        elif isinstance(event, yaml.ScalarEvent):
            nodes, chars = nodes + 1, chars + len(event.value)
            if event.anchor is not None:
                sizes[event.anchor] = (1, len(event.value))
        elif isinstance(event, yaml.AliasEvent):
            add_nodes, add_chars = sizes.get(event.anchor, (1, 0))
            nodes, chars = nodes + add_nodes, chars + add_chars
        if nodes > limits.nodes or chars > limits.chars:
            _refuse_size(path, what, event.start_mark.line + 1, nodes > limits.nodes, limits)


def _refuse_size(path: Path, what: str, line: int, by_nodes: bool, limits: Limits) -> None:
    most = f"{limits.nodes:,} values" if by_nodes else f"{limits.chars:,} characters of text"
    raise UserError(f"{path}:{line}: the {what} holds more than {most} here, its aliases "
                    f"(*name) expanded, the most a {what} may; write it out without "
                    f"aliases (docs/limits.md)")


def _compose(text: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (it keeps the lines) and the value built from it: one parse."""
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        return root, (loader.construct_document(root) if root is not None else None)
    finally:
        loader.dispose()


def read_yaml(path: Path, what: str, fields: str) -> tuple[dict[str, Any], yaml.Node | None]:
    """A YAML mapping and its composed node tree (for line numbers); errors say file:line.
    Read within :data:`LIMITS`; duplicate keys and control characters in any key or value
    are refused."""
    text = read_text(path, what)
    check_events(text, path, what)
    try:
        root, data = _compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise UserError(f"{path}{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
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


def load_model(path: Path, model: type[M], what: str, fields: str) -> tuple[M, yaml.Node | None]:
    """:func:`read_yaml`, validated as ``model``: a problem is refused with its file:line
    (:func:`format_validation_error`); returns the model and the node tree (for locations)."""
    data, root = read_yaml(path, what, fields)
    try:
        return model.model_validate(data), root
    except ValidationError as exc:
        raise UserError(format_validation_error(path, root, exc, model, what)) from None
