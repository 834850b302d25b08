"""orch models: every framework builds the same networks (equal parameter counts)."""

from __future__ import annotations

import json

import pytest

from orchestrator import site as sitemod
from orchestrator import zoo
from orchestrator.plan import zoo_counts

from .conftest import IN_CI, run_orch


def test_every_framework_environment_counts_the_catalogue():
    proc = run_orch("models", "--format", "json", timeout=1800)
    recs = json.loads(proc.stdout)
    assert proc.returncode == 0, (proc.stderr, [r for r in recs if not r["agree"]])
    seen = {fw for r in recs for fw in r["frameworks"]}
    assert "torch" in seen
    if IN_CI:  # make test builds every environment of the local site
        assert seen == set(zoo_counts.FRAMEWORKS), {fw: why for r in recs
                                                    for fw, why in r["missing"].items()}
    for r in recs:
        assert r["agree"]
        assert r["frameworks"]["torch"] == r["params"]
        for fw, counts in r["frameworks"].items():
            assert counts, fw
            for ds, n in counts.items():
                assert n == zoo.get(r["model"]).params(ds), (fw, r["model"], ds)


def test_a_framework_that_differs_is_shown(monkeypatch):
    site = sitemod.load("local")[0]
    wrong = {"lenet5": {"cifar": 62_007}}
    monkeypatch.setattr(zoo_counts, "counts_for",
                        lambda s, fw, log=print: wrong if fw == "mxnet" else "not built")
    recs = {r["model"]: r for r in zoo_counts.table(site, ("mxnet", "tensorflow"))}
    assert recs["lenet5"]["agree"] is False
    assert recs["lenet5"]["missing"] == {"tensorflow": "not built"}
    assert recs["alexnet"]["agree"] is True  # nothing counted, nothing differs
    assert recs["alexnet"]["missing"]["mxnet"] == "not implemented in this framework"


@pytest.mark.parametrize("fmt", ["yaml"])
def test_bad_format(fmt):
    proc = run_orch("models", "--format", fmt, "--catalogue-only")
    assert proc.returncode == 2 and "valid: table, json" in proc.stderr
