"""The documentation stays true: relative links lead somewhere, the generated reference equals
what the code would write, the README stays short, and no comment or page tells how the project
was built (an issue or session number names nothing a reader can look up; say what and why)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NARRATION_DIRS = ("orchestrator", "tests", "benchmarks", "scripts", "templates", "docs", "studies",
                  "site-configs", "containers", "frameworks")
# An issue or session number is history; "open-mpi/ompi#11508" (another project's tracker) is a
# fact and does not match. The examples below are built from parts so that a grep of the tree
# for narration finds none here either.
NARRATION = re.compile(r"session [0-9]|\(issue [0-9]+\)|issue [0-9]+", re.I)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
TEXT_SUFFIXES = {".py", ".md", ".j2", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg", ""}


def _narration_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in NARRATION_DIRS:
        files += [p for p in (ROOT / top).rglob("*") if p.is_file()
                  and p.suffix in TEXT_SUFFIXES and "fixtures" not in p.parts
                  and "__pycache__" not in p.parts]
    return files


def narration(text: str) -> list[str]:
    """The lines of ``text`` that narrate the project's history."""
    return [line.strip() for line in text.splitlines() if NARRATION.search(line)]


def test_narration_pattern():
    issue, session = "issue", "session"
    assert narration(f"# with --epochs ({issue} 18), one record\nx = 1")
    assert narration(f'"""{issue.title()} 19: no value runs as shell."""')
    assert narration(f"800 ({session} 30) did not narrow it")
    assert not narration("see open-mpi/ompi#11508; this sweep's pace")


def test_no_history_narration():
    this = Path(__file__).resolve()
    found = []
    for path in _narration_files():
        if path.resolve() == this:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text
        found += [f"{path.relative_to(ROOT)}: {line[:100]}" for line in narration(text)]
    assert not found, "say what and why, not which issue or session:\n" + "\n".join(found)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of a Markdown page's headings: lower case, punctuation dropped,
    spaces to '-'."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_anchor_slugs():
    page = ROOT / "docs" / "index.md"
    assert "how-to-guides-get-a-task-done" in anchors(page)


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file (or heading, after '#') does not exist."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here (no network in tests)
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        missing_anchor = bool(anchor) and dest.suffix == ".md" and anchor not in anchors(dest)
        if not dest.exists() or missing_anchor:
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert broken_links(page) == []


def test_index_links_every_page():
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / t.partition("#")[0]).resolve()
              for t in LINK.findall(index.read_text()) if not re.match(r"[a-z]+:", t)}
    pictures = ROOT / "docs" / "pictures"  # drawn by scripts/gen-pictures, and their data
    pages = [p for p in (ROOT / "docs").rglob("*") if p.suffix in (".md", ".json")
             and p != index and not p.is_relative_to(pictures)]
    assert [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in linked] == []


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_generated_reference_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-reference"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
