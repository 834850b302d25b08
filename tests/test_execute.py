"""Carrying out a sweep (orchestrator/execute/): which run strategy a sweep's choices pick and
the stages a staged sweep goes out in (no job submitted), and what the next sweep on the same
--out submits again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator import execute
from orchestrator import site as sitemod
from orchestrator.errors import UserError
from orchestrator.execute import strategies
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.runs.rundir import JobRecord, Prepared

from .conftest import run_orch


@pytest.mark.parametrize(("flags", "kind", "packed", "all_at_once"), [
    ({}, strategies.Plain, False, False),
    ({"pack": True}, strategies.Pack, True, True),
    ({"pack_shared": True}, strategies.PackShared, True, True),
    ({"array": True}, strategies.Array, False, True),
])
def test_the_sweeps_flags_choose_the_strategy(flags, kind, packed, all_at_once):
    chosen = execute.choose(**flags)
    assert type(chosen) is kind
    assert (chosen.packed, chosen.all_at_once) == (packed, all_at_once)


@pytest.mark.parametrize("flags", [{"pack": True, "array": True},
                                   {"pack": True, "pack_shared": True},
                                   {"pack_shared": True, "array": True}])
def test_two_packing_flags_exclude_each_other(flags):
    with pytest.raises(UserError, match="exclude each other"):
        execute.choose(**flags)


def test_predictions_stage_the_chosen_strategy():
    chosen = execute.choose(pack_shared=True, between=lambda ranks, later: None)
    assert isinstance(chosen, strategies.Staged)
    assert type(chosen.inner) is strategies.PackShared and chosen.packed


def test_a_site_without_a_queue_refuses_packs():
    local = sitemod.load("local")[0]
    execute.choose().refuse(local)  # a job per run goes anywhere
    with pytest.raises(UserError, match="--pack: site 'local'"):
        execute.choose(pack=True).refuse(local)


def _prepared(nodes: tuple[int, ...], skip: set[int] = frozenset()) -> list[Prepared]:
    site = sitemod.load("testcluster")[0]
    runs = expand(SweepSpec(nodes=nodes), site)
    return [Prepared(r, Path("/scratch/runs") / r.run_id,
                     JobRecord(run_id=r.run_id, scheduler="slurm"),
                     "skip" if r.nodes in skip else "submit") for r in runs]


def test_staged_goes_smallest_scale_first_and_states_between_scales():
    prepared = _prepared((4, 1, 2), skip={2})
    calls = []
    staged = execute.choose(between=lambda ranks, later: calls.append((ranks, later)))
    stages = staged.stages(prepared)
    assert [[p.run.nodes for p in stage] for stage, _ in stages] == [[1], [2], [4]]
    for _, after in stages:
        after()
    largest = next(p.run.run_id for p in prepared if p.run.nodes == 4)
    # the finished 2-node run is not predicted; nothing follows the largest scale
    assert calls == [(1, {largest}), (2, {largest})]


def test_run_executes_each_stage_then_its_step(monkeypatch):
    prepared = _prepared((1, 2))
    seen = []
    monkeypatch.setattr(execute, "execute", lambda stage, site, strategy, **options: seen.append(
        ("execute", [p.run.nodes for p in stage], type(strategy).__name__, options)))
    staged = execute.choose(array=True,
                            between=lambda ranks, later: seen.append(("between", ranks)))
    execute.run(staged, prepared, None, wait=True)
    assert seen == [("execute", [1], "Staged", {"wait": True}), ("between", 1),
                    ("execute", [2], "Staged", {"wait": True})]
    seen.clear()
    execute.run(execute.choose(), prepared, None, wait=False)
    assert seen == [("execute", [1, 2], "Plain", {"wait": False})]


@pytest.mark.parametrize(("state", "again"), [("NODE_FAIL", True), ("HUNG", True),
                                              ("FAILED", False)])
def test_next_sweep_resubmits_infrastructure_failures_only(tmp_path, finished_sweep, state,
                                                           again):
    """A run a node failure or a hang ended (its retries spent, or its sweep interrupted)
    says nothing about the workload: the next sweep submits it again as a new attempt. A
    failure of the workload waits for --retry-failed."""
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    ledger = json.loads((rdir / "job.json").read_text())
    (rdir / "job.json").write_text(json.dumps({**ledger, "state": state, "reason": "test"}))
    proc = run_orch("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--out", out,
                    check=again)
    after = json.loads((rdir / "job.json").read_text())
    if again:
        assert "0 already finished, 1 to submit" in proc.stderr, proc.stderr
        assert (after["attempt"], after["state"]) == (2, "COMPLETED")
        assert (rdir / "attempts" / "1" / "ranks" / "rank-0.jsonl").is_file()
    else:
        assert "1 already finished, 0 to submit" in proc.stderr, proc.stderr
        assert (after["attempt"], after["state"]) == (1, state)
