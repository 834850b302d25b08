"""The result set's invariants (orchestrator.results.analyze): a run of one process that exchanges
gradients communicates nothing, where the parameter servers count as such processes (one worker
of tf-ps or mxnet-kvstore pushes and pulls through its servers: real communication)."""

from __future__ import annotations

import json

import pytest

from orchestrator import site as sitemod
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.results import analyze
from orchestrator.spec.api import Run

ONE_RANK = "1-rank run reports communication"


def one_worker(mode: str, **options: str) -> Run:
    """A run of ``mode`` on the local site with one worker (1 node, 1 task per node)."""
    spec = {"options": {k: (v,) for k, v in options.items()}} if options else {}
    run = expand(SweepSpec(nodes=(1,), modes=(mode,), **spec), sitemod.load("local")[0])[0]
    assert run.ranks == 1 and run.tasks_per_node == 1
    return run


def row(run: Run, exposed: float = 0.002766, total: float = 0.003119) -> dict:
    """The runs-table row of ``run`` with measured communication (the issue's 1-worker
    mxnet-kvstore figures by default)."""
    return {"mode": run.mode, "ranks": run.ranks, "nodes": run.nodes,
            "tasks_per_node": run.tasks_per_node, "options": json.dumps(run.options),
            "iterations_measured": 10, "t_comm": exposed, "t_comm_total": total,
            "comm_exceeds_total": 0, "comm_total_reason": None}


@pytest.mark.parametrize(("mode", "options", "processes"), [
    ("mxnet-kvstore", {}, 2),  # one worker, one server (the scheduler exchanges no gradient)
    ("mxnet-kvstore", {"servers_per_node": "2"}, 3),
    ("tf-ps", {}, 2),  # one worker, one ps (the chief schedules steps)
])
def test_one_worker_of_a_parameter_server_mode_communicates(mode, options, processes):
    run = one_worker(mode, **options)
    assert analyze.exchanging(row(run)) == processes
    assert analyze.invariants(row(run)) == []


def test_one_rank_of_an_allreduce_mode_still_may_not_communicate():
    run = one_worker("torch-ddp")
    assert analyze.exchanging(row(run)) == 1
    assert analyze.invariants(row(run)) == [
        f"{ONE_RANK} (2.766 ms exposed, 3.119 ms total)"]
    assert analyze.invariants(row(run, 0.0, 0.0)) == []


def test_a_parameter_server_row_without_its_placement_is_not_judged():
    """A row that lacks nodes or tasks per node cannot say how many servers it had."""
    partial = {k: v for k, v in row(one_worker("tf-ps")).items() if k != "tasks_per_node"}
    assert analyze.exchanging(partial) is None
    assert analyze.invariants(partial) == []
