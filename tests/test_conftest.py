"""conftest's collection hook: a test that starts orch as a process is marked ``orch_process``,
whether it does so itself, through a helper of its module or through a fixture; a test that
only calls orch's code in-process is not."""

from __future__ import annotations

SAMPLE = '''
import subprocess
import sys

import pytest

from tests.conftest import run_orch


def _sweep(out):
    return run_orch("sweep", "--dry-run", "--out", out)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    return _sweep(tmp_path_factory.mktemp("s"))


def test_direct():
    run_orch("--help")


def test_through_helper(tmp_path):
    _sweep(tmp_path)


def test_through_fixture(swept):
    assert swept


def test_popen():
    subprocess.Popen([sys.executable, "-m", "orchestrator", "--help"]).wait()


def test_pure():
    from orchestrator import units
    assert units


def test_other_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''


def test_hook_marks_process_tests_and_not_pure_ones(pytester):
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems  # noqa")
    pytester.makepyfile(test_sample=SAMPLE)
    items, _ = pytester.inline_genitems()
    marked = {item.name: item.get_closest_marker("orch_process") is not None for item in items}
    assert marked == {"test_direct": True, "test_through_helper": True,
                      "test_through_fixture": True, "test_popen": True, "test_pure": False,
                      "test_other_process": False}
