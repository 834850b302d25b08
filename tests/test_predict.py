"""``orch predict`` through the real CLI: every expected number is computed by hand below.

Inputs: (b) a breakdown file (Eq. 8, prefetch, α–β with what-if units), (c) a layer-wise trace
(wait-free back-propagation schedule, no overlap, buckets, α–β), (a) a result set (the 1-node
breakdown of a configuration with α–β, or with communication as measured). No ranks run here.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from orchestrator import zoo

from .conftest import run_orch

approx = pytest.approx


def predict(*args, env=None) -> list[dict]:
    proc = run_orch("predict", *args, "--format", "json", check=True, env=env)
    return {row["workers"]: row for row in json.loads(proc.stdout)}


def fails(*args, env=None) -> str:
    proc = run_orch("predict", *args, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("orch: error: "), proc.stderr
    return lines[0]


@pytest.fixture
def no_netbench(tmp_path):
    """An empty netbench store: nothing is found unless a test puts it there."""
    return {"ORCH_NETBENCH_DIR": str(tmp_path / "empty-store")}


# ---------------------------------------------------------------------- (b) breakdown files


@pytest.fixture
def eq8_file(tmp_path):
    # t_gpu = t_h2d + t_f + t_b + t_u = 0.05 + 0.15 + 0.25 + 0.05 = 0.5
    path = tmp_path / "eq8.yaml"
    path.write_text("t_io: {1: 0.1, 4: 0.2}\nt_h2d: 0.05\nt_f: 0.15\nt_b: 0.25\nt_u: 0.05\n"
                    "t_comm: {1: 0.0, 4: 0.1}\n")
    return path


def test_breakdown_eq8_by_hand(eq8_file):
    rows = predict("--breakdown", eq8_file, "--workers", "1,4")
    # Eq. 8: S = 4 · (0.1 + 0.5) / (0.2 + 0.5 + 0.1) = 2.4 / 0.8 = 3.0
    assert rows[4]["speedup"] == approx(3.0)
    assert rows[4]["t_iter"] == approx(0.8)  # 0.2 + 0.05 + 0.15 + 0.25 + 0.05 + 0.1
    assert rows[4]["t_comm_exposed"] == approx(0.1)
    assert rows[4]["efficiency"] == approx(0.75)
    assert rows[1]["t_iter"] == approx(0.6) and rows[1]["speedup"] == approx(1.0)


def test_breakdown_prefetch_takes_the_max(eq8_file):
    rows = predict("--breakdown", eq8_file, "--workers", "1,4", "--prefetch", "yes")
    # t(1) = max(0.1 + 0.05, 0.15 + 0.25 + 0 + 0.05) = 0.45; t(4) = max(0.25, 0.55) = 0.55
    assert rows[1]["t_iter"] == approx(0.45)
    assert rows[4]["t_iter"] == approx(0.55)
    assert rows[4]["speedup"] == approx(4 * 0.45 / 0.55)


def test_breakdown_json_keys_and_table(eq8_file):
    proc = run_orch("predict", "--breakdown", eq8_file, "--workers", "1,4", check=True)
    assert "speedup" in proc.stdout and "3.00" in proc.stdout and "800.000" in proc.stdout
    row = predict("--breakdown", eq8_file, "--workers", "4")[4]
    for key in ("workers", "t_iter", "speedup", "t_comm_exposed", "t_comm_total", "efficiency"):
        assert key in row


@pytest.fixture
def flat_file(tmp_path):
    path = tmp_path / "flat.json"
    path.write_text(json.dumps({"t_io": 0.01, "t_h2d": 0.0, "t_f": 0.02, "t_b": 0.04,
                                "t_u": 0.01}))
    return path


@pytest.mark.parametrize(("bandwidth", "latency"), [("8Gb/s", "1ms"), ("1GB/s", "1e-3"),
                                                    ("1e9", "1000us"), ("8Gbit", "1000000ns")])
def test_breakdown_alpha_beta_what_if_units(flat_file, no_netbench, bandwidth, latency):
    rows = predict("--breakdown", flat_file, "--workers", "1,2,4", "--bandwidth", bandwidth,
                   "--latency", latency, "--grad-bytes", "1000000", env=no_netbench)
    # α = 1 ms, B = 1e9 B/s, m = 1e6 B: t_comm(N) = 2(N-1)·α + 2(N-1)/N · m/B
    comm = {1: 0.0, 2: 2e-3 + 1e-3, 4: 6e-3 + 1.5e-3}
    for n, c in comm.items():
        assert rows[n]["t_comm_total"] == approx(c)
        assert rows[n]["t_comm_exposed"] == approx(c)
        assert rows[n]["t_iter"] == approx(0.08 + c)
        assert rows[n]["speedup"] == approx(n * 0.08 / (0.08 + c))
        assert rows[n]["alpha"] == approx(1e-3) and rows[n]["bandwidth"] == approx(1e9)


def test_breakdown_alpha_beta_wfbp_hides_comm_behind_backward(flat_file, no_netbench):
    rows = predict("--breakdown", flat_file, "--workers", "1,4", "--bandwidth", "1GB/s",
                   "--latency", "1ms", "--grad-bytes", "1000000", "--overlap", "wfbp",
                   env=no_netbench)
    # total 7.5 ms < t_b = 40 ms: all of it overlaps backward.
    assert rows[4]["t_comm_total"] == approx(7.5e-3)
    assert rows[4]["t_comm_exposed"] == approx(0.0)
    assert rows[4]["speedup"] == approx(4.0)


def test_breakdown_alpha_beta_from_model_gradient(flat_file, no_netbench):
    grad = 4 * zoo.get("resnet18").expected_params["cifar"]
    rows = predict("--breakdown", flat_file, "--workers", "2", "--bandwidth", "10Gb/s",
                   "--latency", "0", "--model", "resnet18", env=no_netbench)
    assert rows[2]["t_comm_total"] == approx(2 * 1 / 2 * grad / 1.25e9)


# ---------------------------------------------------------------------- (c) layer-wise traces

TRACE = """id,name,forward_us,backward_us,comm_us,size_bytes
0,data,100,0,0,0
1,conv1,10,30,40,4000
2,conv2,20,20,10,1000
3,fc,30,10,30,3000
"""


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def test_trace_wait_free_schedule_by_hand(trace_file):
    rows = predict("--trace", trace_file, "--workers", "1,2", "--overlap", "wfbp")
    # Backward fc [0,10], conv2 [10,30], conv1 [30,60]. Sends on one link, each as soon as its
    # gradient exists and the link is free: fc [10,40], conv2 [40,50], conv1 [60,100].
    # Exposed = 100 - 60 = 40 us; t_iter = io 100 + fwd 60 + bwd 60 + 40 = 260 us.
    assert rows[2]["t_comm_exposed"] == approx(40e-6)
    assert rows[2]["t_comm_total"] == approx(80e-6)
    assert rows[2]["t_iter"] == approx(260e-6)
    assert rows[1]["t_iter"] == approx(220e-6)  # one worker sends nothing
    assert rows[2]["speedup"] == approx(2 * 220 / 260)


def test_trace_without_overlap_sends_after_backward(trace_file):
    rows = predict("--trace", trace_file, "--workers", "1,2", "--overlap", "none")
    # All 80 us of sends after backward: t_iter = 100 + 60 + 60 + 80 = 300 us.
    assert rows[2]["t_comm_exposed"] == approx(80e-6)
    assert rows[2]["t_iter"] == approx(300e-6)
    assert rows[2]["speedup"] == approx(2 * 220 / 300)


def test_trace_prefetch_and_buckets(trace_file):
    rows = predict("--trace", trace_file, "--workers", "1,2", "--overlap", "wfbp",
                   "--prefetch", "yes")
    # max(io 100, 60 + 60 + 40) = 160 at 2 workers; max(100, 120) = 120 at 1.
    assert rows[2]["t_iter"] == approx(160e-6)
    assert rows[2]["speedup"] == approx(2 * 120 / 160)
    rows = predict("--trace", trace_file, "--workers", "2", "--overlap", "wfbp",
                   "--bucket-size", "4000")
    # Buckets (backward order) of >= 4000 B: {fc, conv2} ready at 30, 30 + 10 us -> [30,70];
    # {conv1} ready at 60, link free at 70 -> [70,110]. Exposed 50 us; t_iter 270 us.
    assert rows[2]["t_comm_exposed"] == approx(50e-6)
    assert rows[2]["t_iter"] == approx(270e-6)


def test_trace_alpha_beta_rewrites_every_layer(trace_file, no_netbench):
    rows = predict("--trace", trace_file, "--workers", "2", "--overlap", "wfbp",
                   "--latency", "5us", "--bandwidth", "100MB/s", env=no_netbench)
    # N = 2: comm = 2·1·5 us + 2·(1/2)·m / 1e8 B/s = 10 + m/100 us: fc 40, conv2 20, conv1 50.
    # fc [10,50], conv2 [50,70], conv1 [70,120]: exposed 60 us, t_iter 100 + 60 + 60 + 60.
    assert rows[2]["t_comm_total"] == approx(110e-6)
    assert rows[2]["t_comm_exposed"] == approx(60e-6)
    assert rows[2]["t_iter"] == approx(280e-6)


# ---------------------------------------------------------------------- (a) result sets

BASE = {"t_io": 0.001, "t_h2d": 0.0005, "t_f": 0.004, "t_b": 0.005, "t_comm": 0.001,
        "t_u": 0.0005}  # t_iter(1) = 0.012


def write_result_set(root, model="resnet18"):
    """A result set (results/runs.parquet only) with a 1-, 2- and 4-node run."""
    rows = []
    for nodes, t_comm, speedup in ((1, 0.001, 1.0), (2, 0.003, 1.7), (4, 0.006, 2.9)):
        row = {"run_id": f"torch-ddp-{model}-ib-n{nodes}", "site": "siteA", "partition": "ib",
               "interconnect": "infiniband", "mode": "torch-ddp", "framework": "torch",
               "launcher": "srun", "model": model, "dataset": "cifar", "nodes": nodes,
               "tasks_per_node": 1, "ranks": nodes, "batch_size": 32, "iters": 10,
               "warmup": 2, "repeat": 0, "options": json.dumps({"backend": "gloo"}),
               "state": "COMPLETED", "reason": None, "samples_per_s": 1000.0 * speedup,
               "samples_per_s_std": 10.0, **BASE, "t_comm": t_comm,
               "t_comm_total": t_comm + 0.001, "speedup": speedup,
               "efficiency": speedup / nodes}
        row["t_iter"] = sum(row[p] for p in BASE)
        rows.append(row)
    (root / "results").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "results" / "runs.parquet", index=False)
    return root


def test_result_set_alpha_beta_by_hand(tmp_path, no_netbench):
    d = write_result_set(tmp_path / "sweep")
    grad = 4 * zoo.get("resnet18").expected_params["cifar"]  # > 1 MiB: DDP overlaps (wfbp)
    rows = predict("--results", d, "--bandwidth", "1GB/s", "--latency", "100us",
                   "--workers", "1,2,4,8", env=no_netbench)
    for w in (1, 2, 4, 8):
        total = 2 * (w - 1) * 1e-4 + 2 * (w - 1) / w * grad / 1e9
        exposed = 0.001 + max(0.0, total - BASE["t_b"])  # the 1-node exposed comm stays
        assert rows[w]["t_comm_total"] == approx(total)
        assert rows[w]["t_comm_exposed"] == approx(exposed)
        assert rows[w]["t_iter"] == approx(0.011 + exposed)
        assert rows[w]["speedup"] == approx(w * 0.012 / (0.011 + exposed))
        assert rows[w]["overlap"] == "wfbp"
    assert rows[2]["measured_speedup"] == approx(1.7)
    assert rows[4]["residual_speedup"] == approx(2.9 - rows[4]["speedup"])
    assert rows[8]["measured_speedup"] is None
    none = predict("--results", d, "--bandwidth", "1GB/s", "--latency", "100us", "--workers",
                   "4", "--overlap", "none", env=no_netbench)
    total4 = 6e-4 + 1.5 * grad / 1e9
    assert none[4]["t_iter"] == approx(0.011 + 0.001 + total4)


def test_result_set_without_netbench_uses_measured_comm(tmp_path, no_netbench):
    d = write_result_set(tmp_path / "sweep")
    rows = predict("--results", d, env=no_netbench)
    assert sorted(rows) == [1, 2, 4]
    # Compute as on 1 node (0.011 s) plus the communication measured at N.
    assert rows[2]["t_iter"] == approx(0.011 + 0.003)
    assert rows[4]["speedup"] == approx(4 * 0.012 / (0.011 + 0.006))
    assert rows[4]["comm_source"].startswith("measured")
    message = fails("--results", d, "--workers", "8", env=no_netbench)
    assert "no α–β and no measured communication at 8 worker(s)" in message
    assert "orch netbench" in message


def test_result_set_uses_the_partitions_stored_netbench(tmp_path):
    d = write_result_set(tmp_path / "sweep")
    store = tmp_path / "store"
    store.mkdir()
    (store / "siteA-ib.json").write_text(json.dumps({
        "site": "siteA", "partition": "ib", "interconnect": "infiniband", "backend": "gloo",
        "workers": 2, "nodes": 2, "tasks_per_node": 1, "alpha": 1e-4, "bandwidth": 1e9,
        "sizes": [4, 1024], "seconds": [2e-4, 2.01e-4], "iterations": 3,
        "run_id": "x", "run_dir": "/x"}))
    rows = predict("--results", d, "--workers", "4", "--overlap", "none",
                   env={"ORCH_NETBENCH_DIR": str(store)})
    grad = 4 * zoo.get("resnet18").expected_params["cifar"]
    assert rows[4]["t_comm_total"] == approx(6e-4 + 1.5 * grad / 1e9)
    assert rows[4]["alpha"] == approx(1e-4) and "siteA-ib.json" in rows[4]["comm_source"]
    # What-if: the same partition with ten times the bandwidth (α stays the measured one).
    fast = predict("--results", d, "--workers", "4", "--overlap", "none", "--bandwidth",
                   "10GB/s", env={"ORCH_NETBENCH_DIR": str(store)})
    assert fast[4]["t_comm_total"] == approx(6e-4 + 1.5 * grad / 1e10)


# ---------------------------------------------------------------------- errors: one line, exit 2


def test_errors_are_one_line_exit_2(tmp_path, eq8_file, trace_file, flat_file, no_netbench):
    assert "t_io has no value for 2 worker(s)" in fails("--breakdown", eq8_file,
                                                        "--workers", "1,2")
    assert "give exactly one input" in fails("--breakdown", eq8_file, "--trace", trace_file)
    assert "give exactly one input" in fails()
    assert "--bandwidth 'fast'" in fails("--breakdown", flat_file, "--bandwidth", "fast",
                                         "--latency", "1us", "--grad-bytes", "10")
    assert "--latency is needed too" in fails("--breakdown", flat_file, "--bandwidth",
                                              "10Gb/s", "--grad-bytes", "10", env=no_netbench)
    assert "needs the gradient size" in fails("--breakdown", flat_file, "--bandwidth",
                                              "10Gb/s", "--latency", "1us")
    assert "--overlap both: valid: none, wfbp" in fails("--trace", trace_file, "--overlap",
                                                        "both")
    assert "--workers: 'x' is not a whole number" in fails("--trace", trace_file,
                                                           "--workers", "1,x")
    bad = tmp_path / "bad.yaml"
    bad.write_text("t_io: 0.1\nt_h2d: 0\nt_f: fast\nt_b: 0.1\nt_u: 0\n")
    assert f"{bad}: field 't_f'" in fails("--breakdown", bad)
    assert "no such directory" in fails("--results", tmp_path / "nothing")


@pytest.mark.parametrize(("args", "message"), [
    (("--pattern", "none"), "--pattern none: no model for this communication pattern"),
    (("--tasks-per-node", "0"), "--tasks-per-node 0: must be at least 1"),
    (("--tasks-per-node", "2", "--gpus-per-node", "4"), "disagree"),
])
def test_predict_two_level_bad_input_is_one_line(tmp_path, args, message):
    trace = tmp_path / "t.csv"
    trace.write_text("id,name,forward_us,backward_us,comm_us,size_bytes\n1,a,1,2,1,100\n")
    proc = run_orch("predict", "--trace", trace, "--bandwidth", "10Gb/s", "--latency", "2us",
                    *args, env={"ORCH_NETBENCH_DIR": str(tmp_path / "none")})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_predict_from_a_trace_to_1024_workers(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("id,name,forward_us,backward_us,comm_us,size_bytes\n0,data,10,0,0,0\n"
                     "1,conv,100,200,5,4000\n2,fc,50,100,20,400000\n")
    proc = run_orch("predict", "--trace", trace, "--workers", "64,256,1024", "--tasks-per-node",
                    4, "--bandwidth", "10Gb/s", "--latency", "5us", "--intra-bandwidth",
                    "100GB/s", "--pattern", "hierarchical-allreduce", "--format", "json",
                    env={"ORCH_NETBENCH_DIR": str(tmp_path / "none")}, check=True)
    rows = {r["workers"]: r for r in json.loads(proc.stdout)}
    # fc's message at 1,024 = 256 nodes x 4: intra ring of 4 (α 5 µs, B 1e11) + inter ring
    # of 256 (α 5 µs, B 1.25e9): 6·5 + 1.5·4e5/1e11·1e6 + 510·5 + 2·255/256·4e5/1.25e9·1e6
    fc = 6 * 5 + 1.5 * 4e5 / 1e11 * 1e6 + 510 * 5 + 2 * 255 / 256 * 4e5 / 1.25e9 * 1e6
    conv = 6 * 5 + 1.5 * 4e3 / 1e11 * 1e6 + 510 * 5 + 2 * 255 / 256 * 4e3 / 1.25e9 * 1e6
    assert rows[1024]["t_comm_total"] == pytest.approx((fc + conv) / 1e6)
    assert rows[1024]["nodes"] == 256 and rows[1024]["pattern"] == "hierarchical-allreduce"
    assert "what-if intra" in rows[64]["network"]


def test_hidden_communication_takes_the_cpu_it_uses_from_backward():
    """measured_point with comm_cpu: the change in hidden communication (wfbp: up to
    t_b) lengthens backward by that share; with no overlap nothing is hidden, so nothing is
    taken; CPU-bound communication (1) hides nothing at all."""
    from orchestrator.perfmodel.inputs import ModelInputError
    from orchestrator.perfmodel.predict import measured_point

    phases = {"t_io": 0.0, "t_h2d": 0.0, "t_f": 0.3, "t_b": 0.8, "t_comm": 0.0, "t_u": 0.1}
    plain = measured_point(phases, 1.2, 0.0, 0.6, overlap="wfbp")
    assert plain["t_iter"] == pytest.approx(1.2) and plain["t_comm_cpu"] == 0.0
    taxed = measured_point(phases, 1.2, 0.0, 0.6, overlap="wfbp", comm_cpu=0.25)
    assert taxed["t_comm_cpu"] == pytest.approx(0.15)  # 0.6 s hidden, a quarter of its time
    assert taxed["t_iter"] == pytest.approx(1.35) and taxed["t_b"] == pytest.approx(0.95)
    bound = measured_point(phases, 1.2, 0.0, 1.0, overlap="wfbp", comm_cpu=1.0)
    assert bound["t_iter"] == pytest.approx(1.2 + 0.8 + 0.2)  # hidden 0.8 + exposed 0.2
    none = measured_point(phases, 1.2, 0.0, 0.6, overlap="none", comm_cpu=0.5)
    assert none["t_comm_cpu"] == 0.0 and none["t_iter"] == pytest.approx(1.8)
    with pytest.raises(ModelInputError, match="comm_cpu"):
        measured_point(phases, 1.2, 0.0, 0.6, comm_cpu=1.5)


def test_the_gradient_sent_after_backward_is_never_hidden():
    """measured_point with a tail (DDP's last bucket, all-reduced once backward has made its
    gradients): wfbp exposes at least the tail, more where the rest does not fit behind
    backward; the change between the sizes is what the prediction adds; overlap none is
    unchanged; a negative tail is refused."""
    from orchestrator.perfmodel.inputs import ModelInputError
    from orchestrator.perfmodel.predict import measured_point

    phases = {"t_io": 0.0, "t_h2d": 0.0, "t_f": 0.3, "t_b": 0.8, "t_comm": 0.0, "t_u": 0.1}
    # 1 rank -> 2: total 0.6 s fits behind backward (0.8 s), its last 0.25 s cannot
    tailed = measured_point(phases, 1.2, 0.0, 0.6, overlap="wfbp", tail_target=0.25)
    assert tailed["t_comm_exposed"] == pytest.approx(0.25)
    assert tailed["t_iter"] == pytest.approx(1.45)
    # total 1.2 s: 0.4 s exceeds backward, more than the tail
    assert measured_point(phases, 1.2, 0.0, 1.2, overlap="wfbp",
                          tail_target=0.25)["t_comm_exposed"] == pytest.approx(0.4)
    # 2 -> 4 from a measured exposed 0.25 s (its tail 0.25): the tail grows to 0.375
    two = {**phases, "t_comm": 0.25}
    four = measured_point(two, 1.45, 0.6, 0.9, overlap="wfbp", tail_base=0.25,
                          tail_target=0.375)
    assert four["t_comm_exposed"] == pytest.approx(0.375)
    # a tail never exceeds the communication it is part of; overlap none: all exposed anyway
    assert measured_point(phases, 1.2, 0.0, 0.1, overlap="wfbp",
                          tail_target=0.5)["t_comm_exposed"] == pytest.approx(0.1)
    assert measured_point(phases, 1.2, 0.0, 0.6, overlap="none",
                          tail_target=0.25)["t_iter"] == pytest.approx(1.8)
    with pytest.raises(ModelInputError, match="tail"):
        measured_point(phases, 1.2, 0.0, 0.6, overlap="wfbp", tail_target=-1.0)


def test_ddp_buckets_fill_in_reverse_until_the_cap():
    """torch-ddp's footer buckets: parameters in reverse registration order, a bucket closed
    once it reaches the cap, the rest in the last one (the first layers' gradients)."""
    from orchestrator.modes.torch_ddp.rank import bucket_bytes

    assert bucket_bytes([10, 20, 30, 40], 50) == [70, 30]
    assert bucket_bytes([10, 20, 30, 40], 1000) == [100]
    assert bucket_bytes([60, 5, 5], 10) == [10, 60]
    assert bucket_bytes([], 10) == []
