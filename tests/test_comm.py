"""The communication models (orchestrator/perfmodel/comm.py), one per pattern, on a two-level
network: every expected number is computed by hand in the comments (α in seconds, B in
bytes/s, m in bytes)."""

from __future__ import annotations

import pytest

from orchestrator import perfmodel as pm
from orchestrator.perfmodel import AlphaBeta, ModelInputError, Network
from orchestrator.report.whatif import trace_network_rows

approx = pytest.approx
# Round numbers: inter α = 1 ms, B = 1e6 B/s; intra α = 0.1 ms, B = 1e7 B/s; m = 1e6 B.
INTER = AlphaBeta(alpha=1e-3, bandwidth=1e6)
INTRA = AlphaBeta(alpha=1e-4, bandwidth=1e7)
NET = Network(inter=INTER, intra=INTRA)
M = 1e6


@pytest.mark.parametrize("pattern", ["allreduce", "hierarchical-allreduce",
                                     "allgather-reducescatter"])
def test_one_worker_communicates_nothing(pattern):
    assert pm.pattern_comm_time(pattern, M, 1, 4, NET) == 0.0


def test_ring_by_hand():
    # 4 ranks on 4 nodes: 2·3·1e-3 + 2·3/4·1e6/1e6 = 0.006 + 1.5
    assert pm.ring_allreduce_time(M, 4, 1, NET) == approx(1.506)
    # 4 ranks on one node: intra α-β: 2·3·1e-4 + 1.5·1e6/1e7 = 0.0006 + 0.15
    assert pm.ring_allreduce_time(M, 4, 4, NET) == approx(0.1506)
    # 8 ranks, 4 per node (2 nodes): the inter hop paces the ring: 2·7·1e-3 + 2·7/8
    assert pm.ring_allreduce_time(M, 8, 4, NET) == approx(0.014 + 1.75)
    # the same as the single-level formula when there is one level
    assert pm.ring_allreduce_time(M, 8, 1, Network(inter=INTER)) == approx(
        pm.allreduce_time(M, 8, INTER.alpha, INTER.bandwidth))


def test_hierarchical_by_hand():
    # 8 ranks, 4 per node: intra ring of 4 (0.1506) + inter ring of 2 nodes (2·1e-3 + 1.0)
    assert pm.hierarchical_allreduce_time(M, 8, 4, NET) == approx(0.1506 + 1.002)
    # limiting cases: one rank per node = the inter ring; one node = the intra ring
    assert pm.hierarchical_allreduce_time(M, 4, 1, NET) == approx(1.506)
    assert pm.hierarchical_allreduce_time(M, 4, 4, NET) == approx(0.1506)
    # it beats the flat ring when the node's links are faster
    assert pm.hierarchical_allreduce_time(M, 64, 4, NET) < pm.ring_allreduce_time(M, 64, 4, NET)


def test_reduce_scatter_allgather_by_hand():
    # with resharding: 3 halves of a ring all-reduce; without: 2 halves (one all-reduce)
    assert pm.reduce_scatter_allgather_time(M, 4, 1, NET) == approx(1.5 * 1.506)
    assert pm.reduce_scatter_allgather_time(M, 4, 1, NET, reshard_after_forward=False) == \
        approx(1.506)


def test_parameter_server_by_hand():
    # 4 workers on 4 nodes, 1 server: the server link carries (4−1)·m remote bytes:
    # 2·(1e-3 + 3e6/1e6) = 6.002 (its own node's worker, 1e6/1e7 = 0.1, goes in parallel)
    assert pm.parameter_server_time(M, 4, 1, NET, servers=1) == approx(6.002)
    # 4 servers, one a node: a server's remote share 3·m/4 = 0.75 s per direction, and a
    # worker's node link the same (m/4 goes to the server beside it): 2·(1e-3 + 0.75)
    assert pm.parameter_server_time(M, 4, 1, NET, servers=4) == approx(1.502)
    # 2 servers on 4 nodes: half the workers have none beside them, their link carries m
    assert pm.parameter_server_time(M, 4, 1, NET, servers=2) == approx(2 * (1e-3 + 1.5))
    # one worker on one node still pushes and pulls (over the node's link): 2·(1e-4 + 0.1)
    assert pm.parameter_server_time(M, 1, 1, NET, servers=1) == approx(0.2002)
    # more servers never cost more; bandwidth x2 halves the byte term
    fast = Network(inter=AlphaBeta(alpha=1e-3, bandwidth=2e6), intra=INTRA)
    assert pm.parameter_server_time(M, 4, 1, fast, servers=1) == approx(2 * (1e-3 + 1.5))


def test_bandwidth_scaling_and_no_intra_level():
    double = Network(inter=AlphaBeta(alpha=1e-3, bandwidth=2e6))
    # ring bytes term halves with twice the bandwidth: 0.006 + 0.75
    assert pm.ring_allreduce_time(M, 4, 1, double) == approx(0.756)
    # without an intra level, ranks of a node use the inter α-β
    assert pm.ring_allreduce_time(M, 4, 4, Network(inter=INTER)) == approx(1.506)


def test_pattern_without_model_says_so():
    with pytest.raises(ModelInputError, match="pattern 'none' has no model; patterns with one"):
        pm.pattern_comm_time("none", M, 4, 1, NET)


def test_prediction_from_a_measured_run_by_hand():
    phases = {"t_io": 0.0, "t_h2d": 0.0, "t_f": 0.01, "t_b": 0.02, "t_comm": 0.001,
              "t_u": 0.001}
    # t_iter measured 0.035 (3 ms untimed overhead); comm model 0.002 -> 0.006 s total,
    # overlap none: exposed 0.001 + 0.004 = 0.005; t_iter 0.035 + 0.004 = 0.039
    p = pm.measured_point(phases, 0.035, 0.002, 0.006)
    assert p["t_comm_exposed"] == approx(0.005) and p["t_iter"] == approx(0.039)
    # wfbp hides up to t_b = 0.02: both totals hidden, nothing changes
    p = pm.measured_point(phases, 0.035, 0.002, 0.006, overlap="wfbp")
    assert p["t_iter"] == approx(0.035)
    # sync wait: jitter 0.002 s, 1 -> 2 workers adds 0.002 / sqrt(pi)
    p = pm.measured_point(phases, 0.035, 0.0, 0.0, jitter=0.002, base_workers=1,
                                 workers=2)
    assert p["t_sync_wait"] == approx(0.002 / 3.14159265 ** 0.5, rel=1e-4)
    assert pm.expected_max_normal(1) == 0.0
    assert pm.expected_max_normal(4) == approx(1.0294, abs=1e-4)


@pytest.mark.parametrize(("phases", "match"), [
    ({"t_io": 0, "t_h2d": 0, "t_f": 0.01, "t_b": 0.02, "t_u": 0.0}, "phase 't_comm' is missing"),
    ({"t_io": 0, "t_h2d": 0, "t_f": -0.01, "t_b": 0.02, "t_u": 0, "t_comm": 0}, "t_f"),
    ({"t_io": 0, "t_h2d": 0, "t_f": "x", "t_b": 0.02, "t_u": 0, "t_comm": 0}, "t_f"),
])
def test_prediction_refuses_bad_breakdowns(phases, match):
    with pytest.raises(ModelInputError, match=match):
        pm.measured_point(phases, 0.03, 0.0, 0.001)


def test_trace_on_a_two_level_network_by_hand():
    layers = (pm.Layer(id=1, name="a", forward_us=100, backward_us=300, comm_us=1,
                       size_bytes=1000),)
    trace = pm.Trace(t_io_us=0, layers=layers)
    net = Network(inter=AlphaBeta(alpha=1e-6, bandwidth=1e9))
    rows = {r["workers"]: r for r in trace_network_rows(trace, [1, 4], 1, net)}
    # 4 ranks: 2·3·1 µs + 1.5·1000/1e9 s = 6 + 1.5 µs; no overlap: 100 + 300 + 7.5
    assert rows[4]["t_iter"] == approx(407.5e-6)
    assert rows[1]["t_iter"] == approx(400e-6)
    assert rows[4]["speedup"] == approx(4 * 400 / 407.5)
