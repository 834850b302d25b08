"""The documentation's pictures are drawn by scripts/gen-pictures from real runs and the code,
are current, and are shown in the docs; the report they show opens in headless Chromium with no
error and nothing fetched from elsewhere.

"Current": drawn again now, each picture is the file in docs/pictures/, byte for byte where
matplotlib is the version the pictures were drawn with (pictures.json), else to within a few
grey levels per pixel (a new matplotlib may place text a pixel apart). The report screenshot is
not compared (a browser's rendering differs between its versions): the page it shows is checked
in the browser instead.
"""

from __future__ import annotations

import importlib.util
import io
import json
import re
from importlib.machinery import SourceFileLoader
from pathlib import Path

import numpy as np
import pytest

from tests import browser
from tests.conftest import IN_CI

ROOT = Path(__file__).resolve().parents[1]
PICTURES = ROOT / "docs" / "pictures"


@pytest.fixture(scope="module")
def gen():
    """scripts/gen-pictures as a module (a script without the .py suffix)."""
    path = str(ROOT / "scripts" / "gen-pictures")
    spec = importlib.util.spec_from_loader("gen_pictures", SourceFileLoader("gen_pictures", path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def drawn(gen):
    return gen.draw_all()


def _pixels(png: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)


def test_every_picture_comes_from_the_generator(gen):
    on_disk = {p.name for p in PICTURES.glob("*.png")}
    assert on_disk == {*gen.PICTURES, gen.SCREENSHOT}
    manifest = json.loads(gen.MANIFEST.read_text())
    assert set(manifest["pictures"]) == on_disk


def test_pictures_are_current(gen, drawn):
    import matplotlib

    manifest = json.loads(gen.MANIFEST.read_text())
    exact = manifest["matplotlib"] == matplotlib.__version__
    for name, png in drawn.items():
        kept = (PICTURES / name).read_bytes()
        if exact:
            assert png == kept, f"{name} is stale: run scripts/gen-pictures"
        else:
            a, b = _pixels(png), _pixels(kept)
            assert a.shape == b.shape, name
            assert float(np.abs(a - b).mean()) < 3.0, f"{name} is stale: run scripts/gen-pictures"


def test_drawing_is_reproducible(gen, drawn):
    assert gen.wfbp_png() == drawn["wfbp-timeline.png"]
    assert gen.architecture_png() == drawn["architecture.png"]


def test_the_docs_show_at_least_five_pictures():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    shown = {m for page in pages
             for m in re.findall(r"!\[[^\]]*\]\((?:[./]*)(?:docs/)?pictures/([\w.-]+\.png)\)",
                                 page.read_text())}
    assert len(shown) >= 5 and shown <= {p.name for p in PICTURES.glob("*.png")}


def _chromium() -> str:
    binary = browser.find_binary()
    if binary is None:
        problem = "no headless Chromium: apt-get install chromium-headless-shell"
        if IN_CI:
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    return binary


def test_the_report_opens_in_chromium_with_nothing_from_elsewhere(gen, tmp_path):
    """The report of the recorded sweep, as report_screenshot renders it: no console error, no
    request for anything outside the file (its figures are inside it), and it leads with the
    summary and the figures."""
    page = tmp_path / "report.html"
    page.write_text(gen.report_html())
    html = page.read_text()
    assert not re.search(r'(src|href)="(?!data:|#)', html)
    assert html.index('class="summary"') < html.index("<img") < html.index("<details>")
    with browser.Browser(_chromium()) as chromium:
        opened = chromium.open(page.as_uri())
    assert opened.errors == []
    assert all(link.startswith(page.as_uri()) for link in opened.links)
