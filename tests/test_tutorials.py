"""The tutorials run: every shell block of docs/tutorials/*.md marked ``<!-- tutorial: run -->``
(the line before its fence) runs, in the page's order, in one bash with ``set -euo pipefail``,
in a temporary directory, the way a reader would type it: ``orch`` on PATH, the user's site
directory and results history in that directory ($XDG_CONFIG_HOME, $XDG_DATA_HOME), the
machine's caches (framework environments, container images, the pre-flight) reused. A command
that fails fails the test, naming the page and line.

The tutorials keep their sweeps tiny (a few iterations, one or two runs), so this stays short.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "docs" / "tutorials"
MARKER = "<!-- tutorial: run -->"
FENCE = re.compile(r"^```(sh|bash|console)?\s*$")
FAILED_AT = re.compile(r"^tutorial: failed at script line (\d+)$", re.M)
# What each tutorial needs beyond orch: the test cluster, real ranks, Charliecloud's tools.
NEEDS = {"first-sweep.md": ("ranks",), "add-your-cluster.md": ("slurm", "ranks"),
         "slurm-cluster.md": ("slurm", "ranks"), "containers.md": ("ranks", "charliecloud")}
# How-tos that run in CI the same way (their marked blocks), and what they need: Hugging Face's
# Trainer (orch[trainer]) for the trainer mode's.
HOWTOS = ROOT / "docs" / "howto"
HOWTO_NEEDS = {"own-model.md": ("ranks",), "own-trainer.md": ("ranks", "trainer")}


@dataclass
class Block:
    """A runnable code block: its page, the page line of its first command, its lines."""

    page: Path
    first_line: int
    lines: list[str]


def runnable_blocks(page: Path) -> list[Block]:
    """The blocks of ``page`` whose fence follows the marker line."""
    lines = page.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == MARKER:
            if i + 1 >= len(lines) or not FENCE.match(lines[i + 1]):
                raise ValueError(f"{page}:{i + 1}: {MARKER} must be followed by a ```sh fence")
            end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")),
                       None)
            if end is None:
                raise ValueError(f"{page}:{i + 2}: the code block is never closed")
            blocks.append(Block(page, i + 3, lines[i + 2:end]))
            i = end
        i += 1
    return blocks


HEAD = ["set -euo pipefail",
        "trap 'echo \"tutorial: failed at script line $LINENO\" >&2' ERR"]


def script_of(blocks: list[Block]) -> tuple[str, list[tuple[Path, int]]]:
    """One bash script of ``blocks``, and for each script line its page and page line."""
    where: list[tuple[Path, int]] = [(blocks[0].page, 0)] * len(HEAD) if blocks else []
    text = list(HEAD)
    for b in blocks:
        text += b.lines
        where += [(b.page, b.first_line + k) for k in range(len(b.lines))]
    return "\n".join(text) + "\n", where


def reader_env(tmp: Path) -> dict[str, str]:
    """A reader's shell: orch on PATH, own config and data directories, shared caches."""
    env = {k: v for k, v in os.environ.items() if k not in ("ORCH_SITE_PATH", "ORCH_HISTORY")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["XDG_CONFIG_HOME"] = str(tmp / "config")
    env["XDG_DATA_HOME"] = str(tmp / "data")
    return env


def run_blocks(blocks: list[Block], cwd: Path, timeout: float = 900) -> tuple[int, str, str]:
    """Run ``blocks`` in ``cwd``: exit status, output, and where it failed ('' if it did not)."""
    script, where = script_of(blocks)
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, env=reader_env(cwd), timeout=timeout,
                          capture_output=True, text=True)
    failed = ""
    if proc.returncode != 0:
        at = FAILED_AT.search(proc.stderr)
        page, line = where[int(at[1]) - 1] if at and int(at[1]) <= len(where) else (None, 0)
        shown = page.relative_to(ROOT) if page and page.is_relative_to(ROOT) else page
        failed = f"{shown or '?'}:{line}"
    return proc.returncode, proc.stdout + proc.stderr, failed


def test_a_failing_command_is_named_by_page_and_line(tmp_path):
    page = tmp_path / "t.md"
    page.write_text("# T\n\n" + MARKER + "\n```sh\necho one\ncat > f.txt <<EOF\nx\nEOF\n```\n\n"
                    "text\n\n" + MARKER + "\n```sh\ntest -s f.txt\nfalse\necho no\n```\n"
                    "\n```sh\nnot run: no marker\n```\n")
    blocks = runnable_blocks(page)
    assert [(b.first_line, len(b.lines)) for b in blocks] == [(5, 4), (15, 3)]
    rc, out, failed = run_blocks(blocks, tmp_path)
    assert rc != 0 and "one" in out and "no" not in out.split()
    assert failed.endswith("t.md:16")  # the `false`


def test_a_marker_without_a_block_is_refused(tmp_path):
    page = tmp_path / "t.md"
    page.write_text(MARKER + "\ntext\n")
    with pytest.raises(ValueError, match=r"t\.md:1: .* must be followed by a ```sh fence"):
        runnable_blocks(page)


def test_every_tutorial_has_runnable_blocks():
    pages = sorted(p.name for p in TUTORIALS.glob("*.md"))
    assert pages == sorted(NEEDS)
    assert [p for p in pages if not runnable_blocks(TUTORIALS / p)] == []


def _need(condition: bool, why: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


def _marks(page: str) -> list:
    """The page's markers; orch_process by hand, since orch starts from bash, not run_orch."""
    return [pytest.mark.orch_process,
            *(getattr(pytest.mark, n) for n in NEEDS[page] if n in ("ranks", "slurm"))]


def _marks_howto(page: str) -> list:
    return [pytest.mark.orch_process,
            *(getattr(pytest.mark, n) for n in HOWTO_NEEDS[page] if n in ("ranks", "slurm"))]


@pytest.mark.parametrize("page", [pytest.param(p, marks=_marks(p)) for p in sorted(NEEDS)])
def test_tutorial_runs(page, tmp_path, request):
    if "slurm" in NEEDS[page]:
        request.getfixturevalue("slurm_cluster")
    if "charliecloud" in NEEDS[page]:
        _need(os.geteuid() == 0 and shutil.which("ch-run") and shutil.which("debootstrap"),
              "the containers tutorial needs root, ch-run and debootstrap (make container-tools)")
    rc, out, failed = run_blocks(runnable_blocks(TUTORIALS / page), tmp_path)
    assert rc == 0, f"{failed}: the tutorial's command failed\n{out[-4000:]}"


@pytest.mark.parametrize("page", [pytest.param(p, marks=_marks_howto(p))
                                  for p in sorted(HOWTO_NEEDS)])
def test_howto_runs(page, tmp_path):
    if "trainer" in HOWTO_NEEDS[page]:
        import importlib.util

        _need(all(importlib.util.find_spec(m) for m in ("transformers", "accelerate")),
              "the trainer how-to needs orch[trainer] (transformers, accelerate)")
    blocks = runnable_blocks(HOWTOS / page)
    assert blocks, f"{page} has no runnable block"
    rc, out, failed = run_blocks(blocks, tmp_path)
    assert rc == 0, f"{failed}: the how-to's command failed\n{out[-4000:]}"
