"""Every ``orch …`` command line the README and the docs show runs as written: its command (and
subcommand) exists and every option it gives is one of that command's options.

Command lines are found where a reader would copy them from: lines of fenced code blocks that
start with ``orch `` (or ``$ orch``, ``.venv/bin/orch``, after ``VAR=value`` assignments), and
inline code spans that start with ``orch ``. ``orch site list | show NAME | validate FILE``
names three subcommands; ``...`` and ``[ ]`` are placeholders and optional parts; ``;`` and
``&&`` separate commands; a `` | `` into another program ends the command line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from orchestrator.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1", re.S | re.M)
INLINE = re.compile(r"(?<!`)`(orch [^`\n]+)`(?!`)")
PREFIX = re.compile(r"^(?:\$ )?(?:[A-Z_][A-Z0-9_]*=\S* )*(?:\S*/)?orch (?=\S)")


@dataclass(frozen=True)
class Line:
    where: str  # page:line
    text: str  # the command line, from "orch " on


def _fenced(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line inside a fenced code block, continuations joined."""
    out = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(2)) + 1
        lines = block[2].splitlines()
        i = 0
        while i < len(lines):
            number, line = first + i, lines[i]
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1].rstrip() + " " + lines[i].strip()
            out.append((number, line))
            i += 1
    return out


def command_lines(page: Path, root: Path = ROOT) -> list[Line]:
    """Every ``orch …`` command line of a Markdown page."""
    text = page.read_text()
    name = str(page.relative_to(root))
    found = []
    for number, line in _fenced(text):
        line = re.split(r"\s+#", line.strip(), maxsplit=1)[0]
        if PREFIX.match(line):
            found.append(Line(f"{name}:{number}", PREFIX.sub("orch ", line, count=1)))
    outside = FENCE.sub(lambda m: "\n" * m[0].count("\n"), text)  # keep the line numbers
    for match in INLINE.finditer(outside):
        number = outside.count("\n", 0, match.start()) + 1
        found.append(Line(f"{name}:{number}", match[1].replace("\\|", "|")))
    return found


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote in prose: plain words are enough here
        return text.split()


def _commands(line: str) -> list[str]:
    """The separate ``orch`` invocations of one line."""
    parts = re.split(r"\s*(?:;|&&)\s*", line)
    return [p for p in parts if p.startswith("orch ") or p == "orch"]


# typer builds the commands with its own copy of click: they are told apart by what they do.
def _is_group(command) -> bool:
    return hasattr(command, "list_commands")


def _lookup(group, name: str):
    return group.get_command(typer.Context(group), name)


def problems(line: str) -> list[str]:
    """What is wrong with one command line: an unknown command or subcommand, an option its
    command does not have."""
    root = typer.main.get_command(app)
    out = []
    for invocation in _commands(line):
        first, *alternatives = re.split(r" \| ", invocation)
        words = [w.strip("[]") for w in _words(first)[1:]]
        words = [w for w in words if w and w not in ("...", "…")]
        command, path, rest = root, ["orch"], words
        while _is_group(command) and rest and not rest[0].startswith("-"):
            if rest[0].isupper():  # orch COMMAND --help: a placeholder for any command
                break
            sub = _lookup(command, rest[0])
            if sub is None:
                out.append(f"no command '{' '.join([*path, rest[0]])}'")
                break
            command, path, rest = sub, [*path, rest[0]], rest[1:]
        else:  # the whole command was found
            out += _option_problems(command, path, rest)
            out += _alternative_problems(command, path, alternatives)
    return out


def _alternative_problems(command, path: list[str], alternatives: list[str]) -> list[str]:
    """``orch site list | show NAME``: each alternative is a subcommand of the same group; the
    first alternative that is no subcommand is a pipe into another program, and ends it."""
    parent = _lookup_parent(path)
    out = []
    for alternative in alternatives:
        words = [w.strip("[]") for w in _words(alternative)]
        if not words or parent is None or _lookup(parent, words[0]) is None:
            break
        out += _option_problems(_lookup(parent, words[0]), [*path[:-1], words[0]], words[1:])
    return out


def _lookup_parent(path: list[str]):
    if len(path) < 3:
        return None  # orch COMMAND | ...: a pipe, commands have no alternatives at the top
    group = typer.main.get_command(app)
    for name in path[1:-1]:
        group = _lookup(group, name)
    return group if _is_group(group) else None


def _option_problems(command, path: list[str], words: list[str]) -> list[str]:
    known = {"--help"} | {opt for p in command.params if p.param_type_name == "option"
                          for opt in (*p.opts, *p.secondary_opts)}
    out = []
    for word in words:
        if not re.match(r"--?[A-Za-z]", word):
            continue
        flag = word.split("=", 1)[0]
        if flag not in known:
            out.append(f"'{' '.join(path)}' has no option {flag}")
    return out


ALL_LINES = [line for page in PAGES for line in command_lines(page)]


def test_the_parser_finds_command_lines_and_their_problems(tmp_path):
    page = tmp_path / "docs" / "probe.md"
    page.parent.mkdir()
    text = ("Run `orch sweep --nodes 1,2 --batch 32` or `orch modes`.\n\n```sh\n"
            "$ orch study run convergence   # a comment --not-an-option\n"
            "orch site list | show NAME | validate FILE --strict\n"
            "orch sweep ... --no-wait; orch gather runs/x\n"
            "orch results runs/x --format json | jq .\n"
            "orch sweep --nodes 1 \\\n    --wait\n```\n")
    page.write_text(text)
    lines = command_lines(page, tmp_path)
    assert [line.text for line in lines] == [
        "orch study run convergence", "orch site list | show NAME | validate FILE --strict",
        "orch sweep ... --no-wait; orch gather runs/x", "orch results runs/x --format json | jq .",
        "orch sweep --nodes 1 --wait", "orch sweep --nodes 1,2 --batch 32", "orch modes"]
    assert [line.where for line in lines][:2] == ["docs/probe.md:4", "docs/probe.md:5"]
    assert [problems(line.text) for line in lines] == [
        ["no command 'orch study run'"], ["'orch site validate' has no option --strict"],
        [], [], [], ["'orch sweep' has no option --batch"], []]


def test_the_docs_show_command_lines():
    assert len(ALL_LINES) > 150
    assert any(line.where.startswith("README.md") for line in ALL_LINES)


@pytest.mark.parametrize("line", ALL_LINES, ids=lambda line: line.where)
def test_every_documented_command_line_exists(line):
    assert problems(line.text) == [], line.text
