"""The performance model's package API (orchestrator/perfmodel/): iteration time and speedup, the
breakdown and trace inputs, the α–β fit, the schedules and predict. Every expected number is
computed by hand below; the communication patterns, the ledger, the pre-flight and netbench have
files of their own (test_comm, test_ledger, test_preflight, test_netbench)."""

import json

import pytest
import yaml

from orchestrator.errors import UserError
from orchestrator.perfmodel import (
    AlphaBeta,
    Breakdown,
    Layer,
    ModelInputError,
    Trace,
    allreduce_time,
    fit_alpha_beta,
    format_schedule,
    iteration_time,
    load_breakdown,
    load_trace_csv,
    phase_iteration_time,
    predict,
    scale_trace_comm,
    schedule_none,
    schedule_wfbp,
    speedup,
    speedup_eq8,
    trace_iteration_us,
)

approx = pytest.approx

# t_gpu = t_h2d + t_f + t_b + t_u = 0.05 + 0.15 + 0.25 + 0.05 = 0.5
EQ8 = Breakdown(
    t_io={1: 0.1, 4: 0.2},
    t_h2d=0.05,
    t_f=0.15,
    t_b=0.25,
    t_u=0.05,
    t_comm={1: 0.0, 4: 0.1},
)


# ------------------------------------------------------------------ iteration time and speedup


def test_eq8_hand_computed():
    # S = 4 · (0.1 + 0.5) / (0.2 + 0.5 + 0.1) = 2.4 / 0.8 = 3.0
    assert speedup_eq8(EQ8, 4) == approx(3.0)
    assert speedup_eq8(EQ8, 1) == approx(1.0)


def test_eq8_ignores_single_worker_comm():
    # Eq. 8 has no t_comm in the numerator, even if t_comm(1) is given.
    b = EQ8.model_copy(update={"t_comm": {1: 0.3, 4: 0.1}})
    assert speedup_eq8(b, 4) == approx(3.0)
    # ... while the general form does count it: 4 · 0.9 / 0.8 = 4.5
    assert speedup(b, 4) == approx(4.5)


def test_general_speedup_equals_eq8_without_prefetch():
    assert speedup(EQ8, 4, prefetch=False) == approx(speedup_eq8(EQ8, 4))


def test_general_speedup_with_prefetch():
    # t_iter(1) = max(0.1 + 0.05, 0.15 + 0.25 + 0.0 + 0.05) = 0.45
    # t_iter(4) = max(0.2 + 0.05, 0.15 + 0.25 + 0.1 + 0.05) = 0.55
    assert iteration_time(EQ8, 1, prefetch=True) == approx(0.45)
    assert iteration_time(EQ8, 4, prefetch=True) == approx(0.55)
    assert speedup(EQ8, 4, prefetch=True) == approx(4 * 0.45 / 0.55)


def test_sequential_iteration_is_sum_of_phases():
    # 0.2 + 0.05 + 0.15 + 0.25 + 0.05 + 0.1 = 0.8
    assert iteration_time(EQ8, 4) == approx(0.8)


def test_prefetch_max_rule_io_bound_and_compute_bound():
    # I/O bound: io + h2d = 1.0 + 0.1 = 1.1 > f + b + comm + u = 0.2 + 0.3 + 0.1 + 0.05 = 0.65
    assert phase_iteration_time(1.0, 0.1, 0.2, 0.3, 0.05, 0.1, prefetch=True) == approx(1.1)
    # compute bound: 0.1 + 0.1 = 0.2 < 0.65
    assert phase_iteration_time(0.1, 0.1, 0.2, 0.3, 0.05, 0.1, prefetch=True) == approx(0.65)
    # without prefetch everything adds up: 0.1 + 0.1 + 0.2 + 0.3 + 0.05 + 0.1 = 0.85
    assert phase_iteration_time(0.1, 0.1, 0.2, 0.3, 0.05, 0.1, prefetch=False) == approx(0.85)


# ------------------------------------------------------------------------------ Breakdown


def test_breakdown_at_resolves_maps_and_scalars():
    b = EQ8.at(4)
    assert b.is_resolved()
    assert (b.t_io, b.t_h2d, b.t_comm) == (0.2, 0.05, 0.1)
    assert b.t_gpu == approx(0.5)
    assert EQ8.worker_counts() == (1, 4)
    assert not EQ8.is_resolved()


def test_breakdown_at_missing_worker_count_names_field_and_counts():
    with pytest.raises(ModelInputError, match=r"t_io has no value for 2 worker\(s\).*1, 4"):
        EQ8.at(2)


def test_t_comm_defaults_to_zero():
    b = Breakdown(t_io=0.1, t_h2d=0, t_f=0.2, t_b=0.3, t_u=0.0)
    assert b.t_comm == 0.0
    assert iteration_time(b, 8) == approx(0.6)


def test_t_gpu_on_unresolved_breakdown_is_an_error():
    b = Breakdown(t_io=0.1, t_h2d={1: 0.1}, t_f=0.2, t_b=0.3, t_u=0.0)
    with pytest.raises(ModelInputError, match="t_h2d depends on the worker count"):
        _ = b.t_gpu


def test_load_breakdown_yaml_with_worker_count_maps(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(
        "t_io: {1: 0.1, 4: 0.2}\n"
        "t_h2d: 0.05\n"
        "t_f: 0.15\n"
        "t_b: 0.25\n"
        "t_u: 0.05\n"
        "t_comm:\n"
        "  '1': 0\n"
        "  '4': 0.1\n"
    )
    b = load_breakdown(path)
    assert b == EQ8
    assert b.t_comm == {1: 0.0, 4: 0.1}
    assert speedup_eq8(b, 4) == approx(3.0)


def test_load_breakdown_json_string_keys(tmp_path):
    path = tmp_path / "b.json"
    path.write_text(
        json.dumps(
            {
                "t_io": {"1": 0.1, "4": 0.2},
                "t_h2d": 0.05,
                "t_f": 0.15,
                "t_b": 0.25,
                "t_u": 0.05,
                "t_comm": {"1": 0, "4": 0.1},
            }
        )
    )
    assert load_breakdown(path) == EQ8


def _write_yaml(tmp_path, data):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


GOOD = {"t_io": 0.1, "t_h2d": 0.05, "t_f": 0.15, "t_b": 0.25, "t_u": 0.05}


def test_load_breakdown_unknown_field(tmp_path):
    path = _write_yaml(tmp_path, {**GOOD, "t_gpu": 0.5})
    with pytest.raises(ModelInputError) as err:
        load_breakdown(path)
    msg = str(err.value)
    assert str(path) in msg and "'t_gpu'" in msg and "t_io, t_h2d, t_f, t_b, t_u, t_comm" in msg


def test_load_breakdown_wrong_type_names_file_field_expectation(tmp_path):
    path = _write_yaml(tmp_path, {**GOOD, "t_f": "fast"})
    with pytest.raises(ModelInputError) as err:
        load_breakdown(path)
    msg = str(err.value)
    assert str(path) in msg
    assert "t_f" in msg
    assert "non-negative number of seconds" in msg
    assert "'fast'" in msg


@pytest.mark.parametrize(
    ("bad", "field_text"),
    [
        ({"t_b": -0.1}, "field 't_b'"),
        ({"t_b": True}, "field 't_b'"),
        ({"t_io": {"four": 0.2}}, "worker counts"),
        ({"t_io": {0: 0.2}}, "worker counts"),
        ({"t_io": {4: "x"}}, "t_io[4]"),
        ({"t_io": {}}, "empty map"),
    ],
)
def test_load_breakdown_bad_values(tmp_path, bad, field_text):
    path = _write_yaml(tmp_path, {**GOOD, **bad})
    with pytest.raises(ModelInputError) as err:
        load_breakdown(path)
    assert str(path) in str(err.value)
    assert field_text in str(err.value)


def test_load_breakdown_missing_field(tmp_path):
    data = dict(GOOD)
    del data["t_u"]
    path = _write_yaml(tmp_path, data)
    with pytest.raises(ModelInputError, match="field 't_u' is missing"):
        load_breakdown(path)


def test_load_breakdown_yaml_exponent_without_dot_gets_a_hint(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text("t_io: 1e-3\nt_h2d: 0\nt_f: 0.1\nt_b: 0.1\nt_u: 0\n")
    with pytest.raises(ModelInputError, match=r"write 1\.0e-3"):
        load_breakdown(path)


def test_load_breakdown_not_a_mapping_and_bad_syntax(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ModelInputError, match="expected a mapping"):
        load_breakdown(path)
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ModelInputError, match="not valid JSON"):
        load_breakdown(path)
    with pytest.raises(ModelInputError, match="cannot read"):
        load_breakdown(tmp_path / "missing.yaml")


# ------------------------------------------------------------------------------ α–β model


def test_allreduce_time_ring_formula():
    # N = 4, α = 10 µs, m = 1e6 B, B = 1e9 B/s:
    # 2·3·1e-5 + 2·3/4 · 1e6/1e9 = 6e-5 + 1.5e-3 = 1.56e-3
    assert allreduce_time(1e6, 4, 1e-5, 1e9) == approx(1.56e-3)
    assert AlphaBeta(alpha=1e-5, bandwidth=1e9).allreduce(1e6, 4) == approx(1.56e-3)
    assert allreduce_time(1e6, 1, 1e-5, 1e9) == 0.0


def test_allreduce_time_rejects_bad_input():
    with pytest.raises(ModelInputError, match="n: expected an integer >= 1"):
        allreduce_time(1e6, 0, 1e-5, 1e9)
    with pytest.raises(ModelInputError, match="bandwidth"):
        allreduce_time(1e6, 2, 1e-5, 0.0)


@pytest.mark.parametrize("relative", [False, True])
def test_fit_alpha_beta_recovers_exact_parameters(relative):
    alpha, bandwidth, n = 5e-6, 1.25e9, 4  # 10GbE-like
    sizes = [1e3, 1e5, 1e6, 1e8]
    times = [2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bandwidth for m in sizes]
    fit = fit_alpha_beta(sizes, times, n, relative=relative)
    assert fit.alpha == approx(alpha, rel=1e-6)
    assert fit.bandwidth == approx(bandwidth, rel=1e-9)
    assert fit.beta == approx(1 / bandwidth, rel=1e-9)


def test_fit_alpha_beta_needs_two_distinct_sizes():
    with pytest.raises(ModelInputError, match="2 distinct message sizes"):
        fit_alpha_beta([1e6, 1e6, 1e6], [1e-3, 1.1e-3, 0.9e-3], 4)


def test_fit_alpha_beta_rejects_non_positive_bandwidth():
    # Larger messages faster: the slope is negative.
    with pytest.raises(ModelInputError, match="bandwidth is not positive"):
        fit_alpha_beta([1e3, 1e6], [1e-2, 1e-3], 4)


def test_fit_alpha_beta_rejects_bad_shapes_and_one_worker():
    with pytest.raises(ModelInputError, match="equal length"):
        fit_alpha_beta([1e3, 1e6], [1e-3], 4)
    with pytest.raises(ModelInputError, match="at least 2 workers"):
        fit_alpha_beta([1e3, 1e6], [1e-3, 2e-3], 1)


def test_fit_alpha_beta_rejects_clearly_negative_latency():
    # N = 2: t = 2α + m/B with t = m/1e9 − 0.1 ms exactly, so α = −5e-5 s.
    sizes = [1e6, 2e6, 4e6]
    times = [m / 1e9 - 1e-4 for m in sizes]
    with pytest.raises(ModelInputError, match="negative"):
        fit_alpha_beta(sizes, times, 2)


# ------------------------------------------------------------------------- layer traces

# Three layers in forward order (µs, bytes). Backward runs 3 → 2 → 1.
LAYERS = (
    Layer(id=1, name="conv1", forward_us=1, backward_us=2, comm_us=4, size_bytes=400),
    Layer(id=2, name="conv2", forward_us=2, backward_us=3, comm_us=1, size_bytes=100),
    Layer(id=3, name="fc", forward_us=3, backward_us=1, comm_us=4, size_bytes=300),
)
TRACE = Trace(t_io_us=5.0, layers=LAYERS)

TRACE_CSV = """id,name,forward_us,backward_us,comm_us,size_bytes
0,data,5,0,0,0
1,conv1,1,2,4,400
2,conv2,2,3,1,100
3,fc,3,1,4,300
"""


def _timeline(schedule):
    return [
        (t.id, t.backward_start_us, t.backward_end_us, t.comm_start_us, t.comm_end_us)
        for t in schedule.layers
    ]


def test_schedule_wfbp_hand_timeline():
    # backward:  fc [0,1]   conv2 [1,4]   conv1 [4,6]          -> backward ends at 6
    # sends (one link, in order):
    #   fc    ready 1, link free 0  -> [1, 5]
    #   conv2 ready 4, link busy to 5 -> [5, 6]   (waits 1 µs on the link)
    #   conv1 ready 6, link free 6  -> [6, 10]
    # exposed = 10 − 6 = 4; total comm 4 + 1 + 4 = 9; hidden 5
    s = schedule_wfbp(LAYERS)
    assert _timeline(s) == [
        (3, 0, 1, 1, 5),
        (2, 1, 4, 5, 6),
        (1, 4, 6, 6, 10),
    ]
    assert s.backward_us == 6
    assert s.forward_us == 6
    assert s.comm_total_us == 9
    assert s.exposed_comm_us == 4
    assert s.hidden_comm_us == 5


def test_schedule_none_hand_timeline():
    # backward as above, ends at 6; then fc [6,10], conv2 [10,11], conv1 [11,15]
    # exposed = sum of comm = 9
    s = schedule_none(LAYERS)
    assert _timeline(s) == [
        (3, 0, 1, 6, 10),
        (2, 1, 4, 10, 11),
        (1, 4, 6, 11, 15),
    ]
    assert s.exposed_comm_us == 9
    assert s.hidden_comm_us == 0


def test_wfbp_layer_without_gradient_sends_nothing():
    # A ReLU between conv2 and fc: backward fc [0,1], relu [1,3], conv2 [3,6], conv1 [6,8]
    # sends: fc [1,5]; relu none; conv2 ready 6 -> [6,7]; conv1 ready 8 -> [8,12]
    # exposed = 12 − 8 = 4
    relu = Layer(id=3, name="relu", forward_us=0.5, backward_us=2, comm_us=0, size_bytes=0)
    fc = LAYERS[2].model_copy(update={"id": 4})
    s = schedule_wfbp((LAYERS[0], LAYERS[1], relu, fc))
    assert _timeline(s) == [
        (4, 0, 1, 1, 5),
        (3, 1, 3, None, None),
        (2, 3, 6, 6, 7),
        (1, 6, 8, 8, 12),
    ]
    assert len(s.sends) == 3
    assert s.exposed_comm_us == 4


def test_wfbp_buckets_sum_of_comm():
    # bucket_bytes = 400, backward order: fc (300) + conv2 (100) = 400 -> one bucket,
    # ready when conv2's backward ends (4), lasts 4 + 1 = 5 -> [4, 9];
    # conv1 (400) alone, ready 6, link busy to 9 -> [9, 13]; exposed 13 − 6 = 7
    s = schedule_wfbp(LAYERS, bucket_bytes=400)
    assert [(x.layer_ids, x.size_bytes, x.start_us, x.end_us) for x in s.sends] == [
        ((3, 2), 400, 4, 9),
        ((1,), 400, 9, 13),
    ]
    assert s.exposed_comm_us == 7
    assert _timeline(s)[0] == (3, 0, 1, 4, 9)


def test_wfbp_buckets_alpha_beta_cost():
    # α = 1 µs, B = 1e8 B/s = 100 B/µs, N = 2: cost(m) = 2·1 + m/100 µs
    # buckets as above: {fc, conv2} 400 B -> 6 µs [4, 10]; {conv1} 400 B -> 6 µs [10, 16]
    # exposed = 16 − 6 = 10
    ab = AlphaBeta(alpha=1e-6, bandwidth=1e8)
    s = schedule_wfbp(LAYERS, bucket_bytes=400, alpha_beta=ab, workers=2)
    assert [(x.start_us, x.end_us) for x in s.sends] == [(approx(4), approx(10)), (10, 16)]
    assert s.exposed_comm_us == approx(10)
    # unbucketed: fc 300 B -> 5 µs [1,6]; conv2 100 B -> 3 µs [6,9]; conv1 -> 6 µs [9,15]
    s = schedule_wfbp(LAYERS, alpha_beta=ab, workers=2)
    assert [(x.start_us, x.end_us) for x in s.sends] == [
        (approx(1), approx(6)),
        (approx(6), approx(9)),
        (approx(9), approx(15)),
    ]
    assert s.exposed_comm_us == approx(9)


def test_schedule_rejects_bad_options():
    with pytest.raises(ModelInputError, match="bucket_bytes"):
        schedule_wfbp(LAYERS, bucket_bytes=0)
    with pytest.raises(ModelInputError, match="both alpha_beta and workers"):
        schedule_wfbp(LAYERS, alpha_beta=AlphaBeta(alpha=0, bandwidth=1e9))
    with pytest.raises(ModelInputError, match="at least one layer"):
        schedule_none([])


def test_trace_iteration_time():
    # no prefetch: io 5 + forward 6 + backward 6 + exposed (wfbp 4 | none 9)
    assert trace_iteration_us(5.0, schedule_wfbp(LAYERS), prefetch=False) == 21
    assert trace_iteration_us(5.0, schedule_none(LAYERS), prefetch=False) == 26
    # prefetch: max(5, 6 + 6 + 4) = 16; with slow I/O max(20, 16) = 20
    assert trace_iteration_us(5.0, schedule_wfbp(LAYERS), prefetch=True) == 16
    assert trace_iteration_us(20.0, schedule_wfbp(LAYERS), prefetch=True) == 20


def test_format_schedule_lists_every_layer():
    text = format_schedule(schedule_wfbp(LAYERS))
    assert "exposed=4.000us" in text
    assert text.count("\n") == 1 + len(LAYERS)
    assert "conv2" in text and "10.000" in text


def test_load_trace_csv(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text(TRACE_CSV)
    trace = load_trace_csv(path)
    assert trace.t_io_us == 5.0
    assert trace.layers == LAYERS
    assert schedule_wfbp(trace).exposed_comm_us == 4


def test_load_trace_csv_columns_in_any_order(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("name,id,size_bytes,comm_us,backward_us,forward_us\nfc,1,8,2,3,4\n")
    (layer,) = load_trace_csv(path).layers
    assert (layer.forward_us, layer.backward_us, layer.comm_us, layer.size_bytes) == (4, 3, 2, 8)
    assert load_trace_csv(path).t_io_us == 0.0


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1,conv1,1,2,4,400\n", "header must be"),
        ("id,name,forward_us,backward_us,comm_us\n1,a,1,2,3\n", r"missing \['size_bytes'\]"),
        ("id,name,forward_us,backward_us,comm_us,size_bytes\n1,a,1,x,3,4\n", "backward_us"),
        ("id,name,forward_us,backward_us,comm_us,size_bytes\n1,a,1,2,-3,4\n", "comm_us"),
        ("id,name,forward_us,backward_us,comm_us,size_bytes\n1,a,1,2,3,4.5\n", "size_bytes"),
        (
            "id,name,forward_us,backward_us,comm_us,size_bytes\n2,a,1,2,3,4\n1,b,1,2,3,4\n",
            "forward order",
        ),
        ("id,name,forward_us,backward_us,comm_us,size_bytes\n0,data,5,0,0,0\n", "no layer rows"),
        ("id,name,forward_us,backward_us,comm_us,size_bytes\n1,a,1,2,3\n", "expected 6 columns"),
    ],
)
def test_load_trace_csv_errors_name_file_and_column(tmp_path, text, match):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(ModelInputError, match=match) as err:
        load_trace_csv(path)
    assert str(path) in str(err.value)


def test_scale_trace_comm_alpha_beta():
    # α = 1 µs, B = 100 B/µs, N = 4: cost(m) = 2·3·1 + 2·3/4 · m/100 = 6 + 0.015·m µs
    ab = AlphaBeta(alpha=1e-6, bandwidth=1e8)
    relu = Layer(id=4, name="relu", forward_us=1, backward_us=1, comm_us=7, size_bytes=0)
    scaled = scale_trace_comm(TRACE.model_copy(update={"layers": (*LAYERS, relu)}), ab, 4)
    assert [x.comm_us for x in scaled.layers] == [approx(12), approx(7.5), approx(10.5), 0.0]
    assert scale_trace_comm(TRACE, ab, 1).layers[0].comm_us == 0.0
    assert scaled.t_io_us == TRACE.t_io_us


# ------------------------------------------------------------------------------- predict


def test_predict_breakdown_matches_eq8():
    preds = predict(EQ8, [1, 4])
    assert [p.workers for p in preds] == [1, 4]
    assert preds[0].speedup == approx(1.0)
    assert preds[1].speedup == approx(3.0)
    assert preds[1].efficiency == approx(0.75)
    assert preds[1].t_iter == approx(0.8)
    assert preds[1].t_comm_exposed == approx(0.1)
    assert preds[1].t_io == approx(0.2)
    assert preds[1].source == "breakdown"


def test_predict_breakdown_alpha_beta_overlap_none_and_wfbp():
    # 1-worker breakdown: io 0.1, h2d 0.05, f 0.15, b 0.25, u 0.05 -> t_iter(1) = 0.6
    # α = 0, B = 1e9, m = 4e8 B, N = 4: t_comm = 2·3/4 · 0.4 = 0.6 s
    one = Breakdown(**GOOD)
    ab = AlphaBeta(alpha=0.0, bandwidth=1e9)
    (none,) = predict(one, [4], alpha_beta=ab, grad_bytes=400_000_000)
    assert none.t_comm_total == approx(0.6)
    assert none.t_comm_exposed == approx(0.6)
    assert none.t_iter == approx(1.2)  # 0.6 + 0.6
    assert none.speedup == approx(4 * 0.6 / 1.2)  # = 2.0, Eq. 8 with t_io constant
    # wfbp without layer detail: exposed = max(0, 0.6 − 0.25) = 0.35 -> t_iter 0.95
    (wfbp,) = predict(one, [4], overlap="wfbp", alpha_beta=ab, grad_bytes=400_000_000)
    assert wfbp.t_comm_exposed == approx(0.35)
    assert wfbp.t_iter == approx(0.95)
    assert wfbp.source == "breakdown+alpha-beta"
    # comm fully hidden when backward is longer than communication
    (hidden,) = predict(one, [2], overlap="wfbp", alpha_beta=ab, grad_bytes=100_000_000)
    # t_comm = 2·1/2 · 0.1 = 0.1 < t_b = 0.25
    assert hidden.t_comm_exposed == 0.0
    assert hidden.speedup == approx(2.0)


def test_predict_prefetch_uses_max_rule():
    # N = 4: max(0.2 + 0.05, 0.15 + 0.25 + 0.1 + 0.05) = 0.55; N = 1: 0.45
    (p,) = predict(EQ8, [4], prefetch=True)
    assert p.t_iter == approx(0.55)
    assert p.speedup == approx(4 * 0.45 / 0.55)


def test_predict_trace_none_and_wfbp():
    # N = 1: no comm: t_iter = 5 + 6 + 6 = 17 µs
    # N = 2, trace comm as measured: none 5 + 12 + 9 = 26 µs, wfbp 5 + 12 + 4 = 21 µs
    none = predict(TRACE, [1, 2], overlap="none")
    wfbp = predict(TRACE, [1, 2], overlap="wfbp")
    assert none[0].t_iter == approx(17e-6)
    assert none[1].t_iter == approx(26e-6)
    assert wfbp[1].t_iter == approx(21e-6)
    assert wfbp[1].speedup == approx(2 * 17 / 21)
    assert wfbp[1].t_comm_total == approx(9e-6)
    assert wfbp[1].t_comm_exposed == approx(4e-6)
    assert (wfbp[1].t_f, wfbp[1].t_b, wfbp[1].t_io) == (approx(6e-6), approx(6e-6), approx(5e-6))


def test_predict_trace_alpha_beta_what_if():
    # α = 1 µs, B = 100 B/µs, N = 2: fc 5 µs, conv2 3 µs, conv1 6 µs (see bucket test)
    # wfbp exposed 9 -> t_iter = 5 + 12 + 9 = 26 µs; none exposed 14 -> 31 µs
    ab = AlphaBeta(alpha=1e-6, bandwidth=1e8)
    (w,) = predict(TRACE, [2], overlap="wfbp", alpha_beta=ab)
    (n,) = predict(TRACE, [2], overlap="none", alpha_beta=ab)
    assert w.t_iter == approx(26e-6)
    assert n.t_iter == approx(31e-6)
    assert w.source == "trace+alpha-beta"
    # buckets of 400 B: exposed 10 -> 27 µs
    (b,) = predict(TRACE, [2], overlap="wfbp", alpha_beta=ab, bucket_bytes=400)
    assert b.t_iter == approx(27e-6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"workers": [4], "overlap": "ring"}, "overlap: expected one of 'none', 'wfbp'"),
        ({"workers": []}, "non-empty list"),
        ({"workers": [0, 4]}, "workers: expected an integer >= 1"),
        ({"workers": [4], "prefetch": "yes"}, "prefetch"),
        ({"workers": [4], "grad_bytes": 10}, "alpha_beta and grad_bytes go together"),
        ({"workers": [4], "bucket_bytes": 10}, "bucket_bytes only applies"),
    ],
)
def test_predict_bad_options(kwargs, match):
    with pytest.raises(ModelInputError, match=match):
        predict(EQ8, **kwargs)


def test_predict_refuses_t_comm_and_alpha_beta_together():
    with pytest.raises(ModelInputError, match="t_comm"):
        predict(EQ8, [4], alpha_beta=AlphaBeta(alpha=0, bandwidth=1e9), grad_bytes=10)


def test_predict_breakdown_missing_worker_count():
    with pytest.raises(ModelInputError, match="no value for 8 worker"):
        predict(EQ8, [8])


def test_model_input_error_is_a_user_error_and_a_value_error():
    assert issubclass(ModelInputError, ValueError)
    assert issubclass(ModelInputError, UserError)
    assert ModelInputError("x").exit_code == 2


def test_a_negative_latency_fit_falls_back_to_bandwidth_alone():
    """Large sizes only, noisy: the free fit puts α below zero; the measured fit holds α at 0
    (the α ≥ 0 least-squares solution, absolute errors) and finds B from the times."""
    from orchestrator.execute.netbench import fit_measured
    from orchestrator.perfmodel.comm import fit_ring

    sizes = [262144, 1048576, 4194304]
    times = [2 * m / 2 / 30e6 * f for m, f in zip(sizes, (0.9, 1.0, 1.02), strict=True)]
    with pytest.raises(ModelInputError, match="negative"):
        fit_alpha_beta(sizes, times, 2)
    fit = fit_measured(sizes, times, 2)
    assert fit.alpha_beta.alpha == 0 and fit.alpha_beta.bandwidth == approx(30e6, rel=0.05)
    assert fit == fit_ring(sizes, times, 2, clamp_alpha=True)
    clamped = fit_ring(sizes, times, 2, relative=True, clamp_alpha=True)
    assert clamped.se_alpha is None and clamped.se_beta > 0
    x = [m / t for m, t in zip(sizes, times, strict=True)]  # 2(N-1)/N = 1 at N = 2
    assert clamped.alpha_beta.bandwidth == approx(sum(v * v for v in x) / sum(x))
    exact = fit_ring(sizes, [m / 30e6 for m in sizes], 2, relative=True, clamp_alpha=True)
    assert exact.alpha_beta.bandwidth == approx(30e6) and exact.se_beta == approx(0, abs=1e-12)


def test_a_burst_of_small_messages_does_not_set_the_bandwidth():
    """Recorded on the test cluster (pre-flight run mpi-allreduce-bench-resnet18-eth-n4-r0-
    29151d38: Open MPI across 4 nodes of its 250 Mbit/s eth, tbf-shaped): the small sizes went
    faster than the link's rate (the token bucket's burst), both free fits put α below zero,
    and the bandwidth must be that of the large sizes a gradient travels in (about 15 MB/s by
    busbw at 4-44.7 MB), not the 21.6 MB/s that weighing every size alike gives."""
    from orchestrator.execute.netbench import fit_measured
    from orchestrator.perfmodel.comm import fit_ring

    sizes = [65536, 262144, 1048576, 4194304, 16777216, 44695848]
    seconds = [0.003212, 0.015560, 0.090100, 0.418873, 1.668658, 4.487392]
    fit = fit_measured(sizes, seconds, 4).alpha_beta
    assert fit.alpha == 0 and fit.bandwidth == approx(15.0e6, rel=0.02)
    assert fit_ring(sizes, seconds, 4, relative=True,
                    clamp_alpha=True).alpha_beta.bandwidth == approx(21.6e6, rel=0.02)
    for m, t in zip(sizes[3:], seconds[3:], strict=True):  # 4 MB and up within 5 %
        assert fit.allreduce(m, 4) == approx(t, rel=0.05)
