"""The documentation site builds without a warning, and every link inside it leads somewhere.

``mkdocs build --strict`` (as ``make docs`` runs it) fails on a broken link or anchor, a page
missing from the nav or a nav entry without a page. The built HTML is then read as a browser
would follow it: every ``href``/``src`` inside the site names a file the build wrote, and every
``#anchor`` an element id of that page. Then every page opens in headless Chromium (Debian's
``chromium-headless-shell``, which ``make test`` installs), served over HTTP as a reader's
browser gets it: no console error, and every link the browser sees inside the site opens a page
or file, and its ``#anchor`` an element of it.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib.util
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests import browser
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


@functools.cache  # a page is read once however many links lead to it
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


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[str]:
    """``directory`` over HTTP on a free port of 127.0.0.1: its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # the test's output is the pages' errors, not a log
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        thread.join()


@pytest.fixture(scope="module")
def served(site):
    """The built site's base URL over HTTP."""
    with serving(site[0]) as base:
        yield base


def _chromium() -> str:
    binary = browser.find_binary()
    if binary is None:
        problem = ("no headless Chromium: apt-get install --no-install-recommends "
                   "chromium-headless-shell (make test does, as root)")
        if IN_CI:
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    return binary


def _page_url(base: str, out: Path, html: Path) -> str:
    rel = html.relative_to(out).as_posix()
    return base + (rel.removesuffix("index.html") if rel.endswith("index.html") else rel)


def _link_problem(link: str, base: str, pages: dict[str, browser.Page]) -> str | None:
    """Why an in-site ``link`` leads nowhere (no page or file, no such element); None if it
    opens."""
    url, _, anchor = link.partition("#")
    if url in pages:
        return None if not anchor or unquote(anchor) in pages[url].ids else "no such anchor"
    if anchor:
        return "an anchor into a file that is not a page"
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return None if answer.status == 200 else f"HTTP {answer.status}"
    except OSError as e:  # urllib's HTTPError is an OSError too
        return str(e)


def test_pages_open_in_headless_chromium(site, served):
    out, _ = site
    pages, errors, dead = browse(_chromium(), served, out)
    assert len(pages) > 30 and sum(len(p.links) for p in pages.values()) > 100
    assert errors == []
    assert dead == []


def browse(binary: str, base: str, out: Path) -> tuple[dict[str, browser.Page], list[str],
                                                       list[str]]:
    """Open every page of the site ``out`` served at ``base``: the pages, their console
    errors, and their in-site links that lead nowhere."""
    urls = [_page_url(base, out, p) for p in sorted(out.rglob("*.html")) if p.name != "404.html"]
    with browser.Browser(binary) as chromium:
        pages = {url: chromium.open(url) for url in urls}
    errors = [f"{url}: {e}" for url, page in pages.items() for e in page.errors]
    links = sorted({link for page in pages.values() for link in page.links
                    if link.startswith(base)})
    dead = [f"{link}: {why}" for link in links
            if (why := _link_problem(link, base, pages)) is not None]
    return pages, errors, dead


def test_the_browser_check_finds_errors_and_dead_links(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_text('<h1 id="top">A</h1><a href="../">home</a>')
    (tmp_path / "index.html").write_text(
        '<a href="a/#top">ok</a><a href="a/#nope">no anchor</a><a href="b/">no page</a>'
        '<script>throw new Error("broken script")</script>')
    with serving(tmp_path) as base:
        _, errors, dead = browse(_chromium(), base, tmp_path)
    assert len(errors) == 1 and "broken script" in errors[0]
    assert [d.split(": ")[0] for d in dead] == [base + "a/#nope", base + "b/"]


def test_console_errors_are_recognised():
    error = {"method": "Runtime.consoleAPICalled",
             "params": {"type": "error", "args": [{"type": "string", "value": "boom"}]}}
    thrown = {"method": "Runtime.exceptionThrown",
              "params": {"exceptionDetails": {"text": "Uncaught",
                                              "exception": {"description": "TypeError: x"}}}}
    failed = {"method": "Log.entryAdded", "params": {"entry": {
        "level": "error", "text": "Failed to load resource: net::ERR_NAME_NOT_RESOLVED",
        "url": "https://fonts.example/css"}}}
    info = {"method": "Runtime.consoleAPICalled",
            "params": {"type": "log", "args": [{"type": "string", "value": "hello"}]}}
    assert [browser.console_error(m) for m in (error, thrown, failed, info)] == [
        "boom", "TypeError: x",
        "Failed to load resource: net::ERR_NAME_NOT_RESOLVED https://fonts.example/css", None]
