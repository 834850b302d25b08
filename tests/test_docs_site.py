"""The documentation site builds without a warning, and every link inside it leads somewhere.

``mkdocs build --strict`` (as ``make docs`` runs it) fails on a broken link or anchor, a page
missing from the nav or a nav entry without a page. The built HTML is then read as a browser
would follow it: every ``href``/``src`` inside the site names a file the build wrote, and every
``#anchor`` an element id of that page. (A headless browser would add the pages' console errors;
the pages carry no script of their own, only the theme's.)
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> tuple[Path, str]:
    """The strictly built site's folder, and what the build printed."""
    if not MKDOCS.exists():
        problem = f"{MKDOCS} is missing: pip install -e '.[docs]' (make test does)"
        if IN_CI:
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(out)],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout + proc.stderr


def test_strict_build_has_no_warning(site):
    _, log = site
    assert [line for line in log.splitlines() if "WARNING" in line] == []


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return [p for item in nav for p in _nav_pages(item)]


def test_every_page_is_in_the_nav_and_built(site):
    out, _ = site
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages - nav == set()
    # The generated reference is part of the site, schemas included (linked from the index).
    assert {"reference/cli.md", "reference/result-set-columns.md"} <= nav
    for page in pages:
        html = "index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html"
        assert (out / html).is_file(), html
    assert (out / "reference" / "site-schema.json").is_file()


class _Refs(HTMLParser):
    """The link targets (href, src) and element ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)
            elif name == "id" and value:
                self.ids.add(value)


def _parse(page: Path) -> _Refs:
    refs = _Refs()
    refs.feed(page.read_text(encoding="utf-8"))
    return refs


def _target_file(out: Path, page: Path, path: str) -> Path:
    """The file a relative URL path of ``page`` opens (a folder opens its index.html)."""
    dest = (page.parent / unquote(path)).resolve() if path else page
    return dest / "index.html" if dest.is_dir() else dest


def _opens(out: Path, dest: Path, anchor: str) -> bool:
    """Whether ``dest`` is a file of the site and, for an HTML page, has the element ``anchor``."""
    if not dest.is_file() or not dest.resolve().is_relative_to(out.resolve()):
        return False
    return not anchor or dest.suffix != ".html" or anchor in _parse(dest).ids


def dead_links(out: Path, page: Path) -> list[str]:
    """The links of built ``page`` that open no file of the site, or no element of it."""
    dead = []
    for target in _parse(page).targets:
        url = urlsplit(target)
        if url.scheme or url.netloc or target.startswith(("mailto:", "data:")):
            continue  # outside the site: not followed (no network in tests)
        dest = _target_file(out, page, url.path)
        if not _opens(out, dest, unquote(url.fragment)):
            dead.append(target)
    return dead


def test_dead_links_are_found(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text('<h2 id="x">X</h2>')
    page = tmp_path / "index.html"
    page.write_text('<a href="a/">ok</a><a href="a/#x">ok</a><a href="a/#y">no anchor</a>'
                    '<a href="b/">no page</a><a href="https://example.org/">out</a>'
                    '<a href="#top">no id here</a>')
    assert dead_links(tmp_path, page) == ["a/#y", "b/", "#top"]


def test_every_internal_link_of_the_site_resolves(site):
    out, _ = site
    dead = [f"{page.relative_to(out)}: {link}" for page in sorted(out.rglob("*.html"))
            if page.name != "404.html" for link in dead_links(out, page)]
    assert dead == []


def test_make_docs_is_the_strict_build():
    rule = re.search(r"^docs:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert rule and "mkdocs build --strict" in rule[1]


def test_links_out_of_docs_become_checkout_paths(tmp_path):
    """A link to a checkout file outside docs/ becomes its path; a dead one stays a link (so the
    strict build fails on it); code blocks are left as they are."""
    spec = importlib.util.spec_from_file_location("hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    docs = ROOT / "docs"
    text = ("[the example](../../site-configs/testcluster.yaml) and [gone](../../no-such.yaml)"
            " and [a page](../index.md)\n```\n[code](../../README.md)\n```\n")
    assert hooks.rewrite(text, docs / "tutorials", docs) == (
        "the example (`site-configs/testcluster.yaml` in the orch checkout) and"
        " [gone](../../no-such.yaml) and [a page](../index.md)"
        "\n```\n[code](../../README.md)\n```\n")
