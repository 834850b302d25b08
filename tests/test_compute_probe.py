"""The pre-flight's compute probe: how much a rank's compute slows when the job's other
nodes compute at once (nodes on one machine share its memory bandwidth and caches even with
CPU shares of their own), and how a prediction scales the smaller run's compute by it.
The probe's timings on the real test cluster: tests/test_preflight.py."""

from __future__ import annotations

import argparse

import pytest

from orchestrator import site as sitemod
from orchestrator.execute import ledger, preflight
from orchestrator.modes.allreduce_bench import rank


def level(probe: dict[int, float] | None, *, machines: int = 1, nodes: int = 4,
          share: float | None = 0.45) -> preflight.Level:
    return preflight.Level(level="inter", site="s", partition="p", nodes=nodes,
                           tasks_per_node=1, alpha=1e-3, bandwidth=1e6, r2=1.0,
                           max_rel_residual=0.0, sizes=[4, 8], seconds=[1e-3, 1e-3],
                           measured_at=0.0, run_id="inter", run_dir="/x", machines=machines,
                           machine_cpus=2, machine_cores=2, node_cpu_share=share,
                           compute_probe=probe)


def test_probe_counts_double_up_to_the_world():
    assert rank.probe_counts(1) == [1]
    assert rank.probe_counts(2) == [1, 2]
    assert rank.probe_counts(4) == [1, 2, 4]
    assert rank.probe_counts(6) == [1, 2, 4, 6]


def test_the_rank_times_every_count_it_computes_in():
    args = argparse.Namespace(model="lenet5", dataset="cifar", batch_size=2, compute_probe=1)
    barriers = []
    import torch

    first = rank.compute_probe(args, 0, 4, torch.device("cpu"), lambda: barriers.append(1))
    last = rank.compute_probe(args, 3, 4, torch.device("cpu"), lambda: barriers.append(1))
    for wall, cpu in (first, last):
        assert set(wall) == set(cpu) and all(v > 0 for v in [*wall.values(), *cpu.values()])
    assert set(first[0]) == {1, 2, 4} and set(last[0]) == {4}  # rank 3: only with all 4
    # up and down the counts, each between two barriers: every rank meets all of them
    assert len(barriers) == 2 * 2 * 2 * 3
    # a model the probe cannot build says so before any barrier (every rank alike)
    lm = argparse.Namespace(model="gpt2-small", dataset="webtext", batch_size=2,
                            compute_probe=1)
    before = len(barriers)
    assert rank.compute_probe(lm, 0, 4, torch.device("cpu"), lambda: barriers.append(1)) \
        is None and len(barriers) == before


def test_probe_seconds_are_the_mean_over_the_ranks_that_computed():
    footers = [{"compute_probe": {"1": 1.0, "2": 1.2, "4": 1.5}},
               {"compute_probe": {"2": 1.4, "4": 1.7}}, {"compute_probe": {"4": 1.6}},
               {"compute_probe": {"4": 1.6, "x": 3, "2": -1}}, {}]
    assert preflight.probe_seconds(footers) == pytest.approx({1: 1.0, 2: 1.3, 4: 1.6})
    assert preflight.probe_seconds([{}, {"compute_probe": None}]) is None


def test_slowdown_interpolates_between_the_counts_and_holds_beyond():
    lv = level({1: 1.0, 2: 1.1, 4: 1.3})
    assert [lv.compute_slowdown(k) for k in (1, 2, 3, 4, 8)] == pytest.approx(
        [1.0, 1.1, 1.2, 1.3, 1.3])
    assert level(None).compute_slowdown(4) == 1.0
    # a count timed faster than a smaller one is noise: never faster than alone
    noisy = level({1: 1.0, 2: 0.95, 4: 1.1})
    assert [noisy.compute_slowdown(k) for k in (2, 3, 4)] == pytest.approx([1.0, 1.05, 1.1])
    assert level({2: 1.1}).compute_slowdown(2) == 1.0  # nothing alone to compare with
    assert "compute x1.10 at 2, x1.30 at 4 ranks computing at once" in lv.describe(now=0.0)


def pf(lv: preflight.Level) -> preflight.Preflight:
    return preflight.Preflight(site="s", partition="p", inter=lv, cpus_per_node=1)


def test_a_prediction_scales_compute_by_the_probe_only_where_nodes_share_a_machine():
    probe = {1: 1.0, 2: 1.1, 4: 1.3}
    shared = pf(level(probe))  # 4 nodes of 0.45 cores on 1 machine of 2: the shares fit
    assert ledger.compute_scale(shared, 1, 2) == pytest.approx(1.1)
    assert ledger.compute_scale(shared, 2, 4) == pytest.approx(1.3 / 1.1)
    # nodes that are machines of their own: whatever the probe saw, no scaling
    assert ledger.compute_scale(pf(level(probe, machines=4)), 1, 4) == 1.0
    # shares that do not fit their machine: ranks take turns there, the older model decides
    crowded = pf(level(probe, share=0.9))
    assert ledger.compute_scale(crowded, 1, 2) == ledger.compute_scale(
        pf(level(None, share=0.9)), 1, 2)


def test_the_probe_is_asked_of_the_across_nodes_level_of_cpu_partitions_only():
    site, _ = sitemod.load("testcluster")
    assert preflight.probe_of(site, "ib", "inter", "resnet18", "cifar", 8) == "resnet18/cifar/8"
    assert preflight.probe_of(site, "ib", "intra", "resnet18", "cifar", 8) is None
    assert preflight.probe_of(site, "ib", "inter", "gpt2-small", "webtext", 8) is None
    assert preflight.probe_of(site, "ib", "inter", "./my_model.py", "cifar", 8) is None
