"""The results history (orchestrator/history/): the store, the comparison and its statistics,
references, and their commands, on synthetic result sets."""

from __future__ import annotations

import json
import multiprocessing
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import UserError
from orchestrator.history import compare, gathered, references, samples, store
from orchestrator.history.stats import (
    RHO_MAX,
    against_spread,
    betainc,
    inflation,
    lag1_autocorrelation,
    t_cdf,
    t_ppf,
    yuen_welch,
)
from orchestrator.site import Site

from .conftest import ROOT, run_orch

PHASES = {"t_io": 0.0005, "t_h2d": 0.0005, "t_f": 0.010, "t_b": 0.020, "t_u": 0.002,
          "t_comm": 0.015}


def result_set(seed: int, scale: dict | None = None, iters: int = 20, ranks: int = 2,
               nodes: int = 2, options: str = '{"backend": "gloo"}', spread: float = 0.08,
               site: str = "local", mode: str = "torch-ddp", seed_id: int | None = None
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A one-run result set (runs, iterations) whose phases are lognormal around PHASES,
    each scaled by ``scale``: 2 warm-up and ``iters`` measured iterations per window. Its run
    id is made from ``seed_id`` (default: the seed)."""
    rng = np.random.default_rng(seed)
    base = {k: v * (scale or {}).get(k, 1.0) for k, v in PHASES.items()}
    run_id = f"{mode}-lenet5-local-n{nodes}-r0-{seed if seed_id is None else seed_id:08x}"
    rows = []
    for window in ("native", "breakdown"):
        for it in range(iters + 2):
            for rank in range(ranks):
                row = {k: v * rng.lognormal(0.0, spread) for k, v in base.items()}
                row["t_comm_total"] = row["t_comm"]
                row["t_iter"] = sum(row.values()) - row["t_comm_total"]
                rows.append({"run_id": run_id, "rank": rank, "iter": it, "window": window,
                             "warmup_iter": it < 2, "samples": 32, **row})
    iters_frame = pd.DataFrame(rows)
    measured = iters_frame[~iters_frame["warmup_iter"]]
    run = {"run_id": run_id, "site": site, "partition": "local", "mode": mode,
           "model": "lenet5", "dataset": "cifar", "nodes": nodes, "tasks_per_node": 1,
           "batch_size": 32, "options": options, "precision": "fp32", "repeat": 0,
           "state": "COMPLETED", "versions": '{"torch": "2.13.0"}',
           "samples_per_s": 32 * ranks / measured["t_iter"].mean(),
           "energy_per_sample_j": None,
           **{k: measured[k].mean() for k in (*PHASES, "t_iter", "t_comm_total")}}
    return pd.DataFrame([run]), iters_frame


def table(seed: int, **kwargs) -> pd.DataFrame:
    return samples.samples(*result_set(seed, **kwargs))


def repeats(seed: int, n: int = 3, **kwargs) -> pd.DataFrame:
    """``n`` runs of one configuration (the run-to-run spread measured: a verdict)."""
    return pd.concat([table(seed * 100 + i, **kwargs) for i in range(n)], ignore_index=True)


# --- the statistics ---------------------------------------------------------------------

@pytest.mark.parametrize(("t", "df", "expected"), [
    (2.0, 5, 0.9490302605850708), (-1.5, 2.5, 0.12391822654314809),
    (0.3, 100, 0.6176000598498482), (0.0, 7, 0.5)])
def test_t_cdf_known_values(t, df, expected):
    assert t_cdf(t, df) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(("p", "df", "expected"), [
    (0.975, 10, 2.228138851986274), (0.975, 1, 12.706204736174694),
    (0.01, 3.7, -3.920507819208549)])
def test_t_ppf_known_values(p, df, expected):
    assert t_ppf(p, df) == pytest.approx(expected, rel=1e-9)


def test_betainc_known_values():
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-12)
    assert betainc(0.5, 7.5, 0.9) == pytest.approx(0.9999999932897103, abs=1e-12)
    assert betainc(2, 3, 0.0) == 0.0 and betainc(2, 3, 1.0) == 1.0


def test_yuen_welch_is_welchs_test_on_trimmed_means():
    # Reference values: scipy.stats.ttest_ind(b, a, trim=0.1, equal_var=False).
    a = np.array([1.0, 1.2, 0.9, 1.1, 1.05, 1.3, 0.95, 1.0, 1.15, 2.5])
    b = np.array([1.3, 1.4, 1.25, 1.5, 1.35, 1.45, 1.2, 1.6, 1.3, 1.4, 4.0])
    d = yuen_welch(a, b)
    assert d.p_greater == pytest.approx(0.00040073480769152117, rel=1e-8)
    assert d.df == pytest.approx(14.466195761856714, rel=1e-10)
    assert (d.low, d.high) == pytest.approx((0.14829707551102878, 0.45309181337786), rel=1e-8)


def test_yuen_welch_without_spread_is_exact():
    d = yuen_welch(np.ones(5), np.ones(5) * 2)
    assert (d.diff, d.low, d.high, d.p_greater) == (1.0, 1.0, 1.0, 0.0)


def test_lag1_autocorrelation_and_the_variance_inflation():
    rng = np.random.default_rng(0)
    independent = rng.normal(size=400)
    ar = np.zeros(400)
    for i in range(1, 400):  # an AR(1) series, lag-1 autocorrelation 0.6
        ar[i] = 0.6 * ar[i - 1] + independent[i]
    assert abs(lag1_autocorrelation(independent)) < 0.15
    assert lag1_autocorrelation(ar) == pytest.approx(0.6, abs=0.1)
    r = lag1_autocorrelation(ar)
    assert inflation([ar]) == pytest.approx((1 + r) / (1 - r))
    assert inflation([-ar[::2] * np.tile([1, -1], 100)]) >= 1.0  # never below independent
    assert inflation([np.array([1.0, 2.0])]) == 1.0  # too short to say
    assert inflation([np.cumsum(np.ones(50))]) == pytest.approx((1 + RHO_MAX) / (1 - RHO_MAX))


def test_autocorrelated_iterations_widen_the_interval():
    a, b = np.log(np.linspace(1.0, 1.2, 20)), np.log(np.linspace(1.05, 1.25, 20))
    plain, inflated = yuen_welch(a, b), yuen_welch(a, b, inflate=(4.0, 4.0))
    assert inflated.diff == plain.diff
    assert inflated.high - inflated.low > 2 * (plain.high - plain.low)
    assert inflated.df < plain.df and inflated.p_greater > plain.p_greater


def test_against_spread_is_a_prediction_interval():
    runs = np.log(np.array([100.0, 104.0, 97.0, 101.0, 99.0, 103.0]))
    s = np.std(runs, ddof=1)
    inside = against_spread(runs, float(np.mean(runs) + 1.5 * s))
    assert inside.low < 0 < inside.high  # 1.5 sd from the mean: inside the spread
    # Reference: the prediction interval of a new value, mean ± t(0.975, 5) s sqrt(1 + 1/6).
    half = 2.5705818366147395 * s * np.sqrt(1 + 1 / 6)
    assert inside.high - inside.low == pytest.approx(2 * half, rel=1e-6)
    outside = against_spread(runs, float(np.mean(runs) - 4 * s))
    assert outside.high < 0 and outside.p_less < 0.025
    flipped = against_spread(runs, float(np.mean(runs) - 4 * s), one_is_b=False)
    assert flipped.diff == pytest.approx(-outside.diff) and flipped.p_greater < 0.025


def test_one_run_against_a_history_is_tested_against_its_spread():
    history = pd.concat([table(seed).assign(run_id=f"h{seed}") for seed in range(1, 6)])
    (same,) = compare.compare(history, table(9))
    assert same.changes["samples_per_s"].unit == "repeat"
    assert (same.changes["samples_per_s"].n_a, same.changes["samples_per_s"].n_b) == (5, 1)
    assert same.verdict == "no measured change"
    (slow,) = compare.compare(history, table(9, scale={"t_comm": 3.0}))
    assert slow.verdict == "slower" and slow.hint == "look at the fabric"
    (back,) = compare.compare(table(9, scale={"t_comm": 3.0}), history)
    assert back.verdict == "faster"


# --- samples ----------------------------------------------------------------------------

def test_samples_are_per_iteration_after_warmup_with_the_configuration():
    s = table(1)
    counts = s.groupby("metric").size()
    assert counts["samples_per_s"] == 20 and counts["t_comm"] == 20 and counts["compute"] == 20
    assert {"site", "mode", "nodes", "options", "repeat"} <= set(s.columns)
    assert (s["value"] > 0).all()


def test_failed_runs_have_no_samples():
    runs, iters = result_set(1)
    assert samples.samples(runs.assign(state="FAILED"), iters).empty


def test_direction_is_declared_once_per_metric():
    rates = {"samples_per_s", "samples_per_s_compute", "tokens_per_s",
             "model_flops_per_s_per_device", "mfu"}
    assert all(samples.BY_NAME[m].higher_is_better for m in rates)
    assert not any(m.higher_is_better for m in samples.METRICS if m.name not in rates)


def test_run_level_metrics_join_where_the_runs_table_has_them():
    runs, iters = result_set(1)
    s = samples.samples(runs.assign(samples_per_s_compute=2000.0, tokens_per_s=5e4), iters)
    per_run = s[s["iter"] == -1].set_index("metric")["value"]
    assert per_run.to_dict() == {"samples_per_s_compute": 2000.0, "tokens_per_s": 5e4}


# --- comparison -------------------------------------------------------------------------

def test_two_samples_of_one_distribution_show_no_measured_change():
    (c,) = compare.compare(table(1), table(2))
    assert c.verdict == "no measured change"
    assert "no measured change" in compare.line(c)


def test_slower_communication_is_found_and_attributed_to_the_fabric():
    (c,) = compare.compare(repeats(1), repeats(2, scale={"t_comm": 2.0}))
    assert c.verdict == "slower"
    assert any(w.startswith("exposed communication +") for w in c.attribution)
    assert "compute unchanged" in c.attribution
    assert c.hint == "look at the fabric"
    assert compare.line(c).startswith("torch-ddp lenet5 local 2x1 b32 backend=gloo: slower ")


def test_slower_compute_points_at_the_nodes():
    (c,) = compare.compare(repeats(1), repeats(2, scale={"t_f": 1.5, "t_b": 1.5}))
    assert c.verdict == "slower" and c.hint.startswith("look at the nodes")


def test_faster_is_said():
    (c,) = compare.compare(repeats(1, scale={"t_comm": 2.0}), repeats(2))
    assert c.verdict == "faster" and compare.headline(c).startswith("faster ")


def test_a_change_below_min_change_is_no_measured_change():
    slow = repeats(2, scale={"t_comm": 1.1})
    assert compare.compare(repeats(1), slow, min_change=0.5)[0].verdict == "no measured change"


def test_only_configurations_in_both_are_compared():
    b = pd.concat([table(2), table(3, nodes=4)])
    assert [c.key["nodes"] for c in compare.compare(table(1), b)] == [2]


def test_ignore_option_matches_runs_that_differ_by_it():
    delayed = table(2, options='{"backend": "gloo", "comm_delay_ms": "30"}')
    assert compare.compare(table(1), delayed) == []
    assert len(compare.compare(table(1), delayed, ignore_options=("comm_delay_ms",))) == 1


def test_repeats_are_the_units_when_both_sides_have_them():
    a = pd.concat([table(1), table(2).assign(run_id="x2")])
    b = pd.concat([table(3), table(4).assign(run_id="x4")])
    (c,) = compare.compare(a, b)
    assert c.changes["samples_per_s"].unit == "repeat"
    assert c.changes["samples_per_s"].n_a == 2


# --- the store --------------------------------------------------------------------------

def with_meta(seed: int, **kwargs) -> pd.DataFrame:
    t = table(seed, **kwargs)
    return t.assign(commit="abc123", dirty=False, image_digest="", measured_at=1_000_000.0,
                    versions='{"torch": "2.13.0"}')


def test_add_list_select(tmp_path):
    e1 = store.add(tmp_path, with_meta(1), Path("/s1"))
    e2 = store.add(tmp_path, with_meta(2, site="other", mode="horovod"), Path("/s2"))
    found, damaged = store.entries(tmp_path)
    assert [e.id for e in found] == [e1.id, e2.id] and damaged == 0
    assert e2.site == ["other"] and e1.commits == ["abc123"]
    table_, used, problems = store.select(tmp_path, site="other")
    assert [e.id for e in used] == [e2.id] and not problems
    assert set(table_["site"]) == {"other"}


def test_since_filters_on_the_date_measured(tmp_path):
    store.add(tmp_path, with_meta(1), Path("/s1"))
    (e,) = store.entries(tmp_path)[0]
    assert store.matches(e, since=store.parse_age("1d"), now=1_000_000.0 + 3600)
    assert not store.matches(e, since=store.parse_age("30m"), now=1_000_000.0 + 3600)


def test_the_same_sweep_is_recorded_once(tmp_path):
    store.add(tmp_path, with_meta(1), Path("/s1"))
    with pytest.raises(UserError, match="already recorded"):
        store.add(tmp_path, with_meta(1), Path("/s1"))


def test_adding_rewrites_nothing(tmp_path):
    store.add(tmp_path, with_meta(1), Path("/s1"))
    before = {p: (p.read_bytes(), p.stat().st_ino) for folder in ("entries", "records")
              for p in (tmp_path / folder).iterdir()}
    store.add(tmp_path, with_meta(2), Path("/s2"))
    assert all((p.read_bytes(), p.stat().st_ino) == was for p, was in before.items())
    # each entry's record under its table's name and its sweep's
    assert len(list((tmp_path / "records").iterdir())) == 4


def _add_in_process(root: str, seed: int) -> None:
    store.add(Path(root), with_meta(seed), Path(f"/s{seed}"))


def test_concurrent_adds_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_in_process, args=(str(tmp_path), seed))
             for seed in (1, 2, 3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    found, damaged = store.entries(tmp_path)
    assert len(found) == 3 and damaged == 0
    assert store.select(tmp_path)[0]["entry"].nunique() == 3


def test_a_truncated_index_line_loses_no_other_entry(tmp_path):
    e1 = store.add(tmp_path, with_meta(1), Path("/s1"))
    with open(tmp_path / "index.jsonl", "ab") as f:  # a crash in the middle of an append
        f.write(b'{"id": "2026')
    e3 = store.add(tmp_path, with_meta(3), Path("/s3"))
    found, damaged = store.entries(tmp_path)
    assert [e.id for e in found] == [e1.id, e3.id] and damaged == 1
    assert "1 damaged record" in store.select(tmp_path)[2][0]


def test_a_truncated_entry_file_loses_no_other_entry(tmp_path):
    e1 = store.add(tmp_path, with_meta(1), Path("/s1"))
    e2 = store.add(tmp_path, with_meta(2), Path("/s2"))
    path = tmp_path / e1.file
    path.write_bytes(path.read_bytes()[:100])
    table_, used, problems = store.select(tmp_path)
    assert [e.id for e in used] == [e2.id]
    assert e1.id in problems[0] and not table_.empty


def test_history_location(monkeypatch, tmp_path):
    monkeypatch.setenv("ORCH_HISTORY", str(tmp_path / "h"))
    assert store.default_root() == tmp_path / "h"
    monkeypatch.delenv("ORCH_HISTORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert store.default_root() == tmp_path / "xdg" / "orch" / "history"


@pytest.mark.parametrize(("text", "expected"), [
    ("history:since=2d,site=a", {"since": 172800.0, "site": "a"}),
    ("history:", {}), ("history:id=2026,mode=horovod", {"id": "2026", "mode": "horovod"})])
def test_parse_selection(text, expected):
    assert store.parse_selection(text) == expected


@pytest.mark.parametrize("text", ["history:since=soon", "history:colour=red", "history:site"])
def test_parse_selection_refuses(text):
    with pytest.raises(UserError, match="history"):
        store.parse_selection(text)


# --- references -------------------------------------------------------------------------

REFS = """\
site: local
partitions:
  local:
    - match: {mode: torch-ddp, nodes: 2}
      metrics:
        samples_per_s: {value: 1400, lower: 0.5, upper: 1.0, unit: samples/s}
        t_comm: {value: 0.015, lower: 0.5, upper: 0.5, unit: s}
    - match: {nodes: 64}
      metrics:
        t_iter: {value: 1, lower: 0.1, upper: 0.1, unit: s}
"""


def test_references_hold_and_fail(tmp_path):
    path = tmp_path / "references.yaml"
    path.write_text(REFS)
    runs, _ = result_set(1)
    outcomes, unmatched = references.check(references.load(path), runs)
    assert [o.ok for o in outcomes] == [True, True]
    assert unmatched == ["partitions.local[1] (nodes=64): no run"]
    slow, _ = result_set(1, scale={"t_comm": 3.0})
    outcomes, _ = references.check(references.load(path), slow)
    assert [o.metric for o in outcomes if not o.ok] == ["t_comm"]
    failed, _ = references.check(references.load(path), runs.assign(state="FAILED"))
    assert not any(o.ok for o in failed) and "not measured (run FAILED)" in failed[0].line()


def test_reference_errors_are_located(tmp_path):
    path = tmp_path / "references.yaml"
    path.write_text("site: local\npartitions:\n  local:\n    - match: {modle: x}\n"
                    "      metrics:\n        t_iter: {value: 1, lower: 0, upper: 0, unit: ms}\n"
                    "        t_bogus: {value: 1, lower: 0, upper: 0, unit: s}\n")
    with pytest.raises(UserError) as exc:
        references.load(path)
    text = str(exc.value)
    assert f"{path}:4: partitions.local[0].match.modle: unknown field" in text
    assert f"{path}:6: partitions.local[0].metrics.t_iter.unit:" in text
    assert f"{path}:7: partitions.local[0].metrics.t_bogus: unknown field" in text


# --- the commands -----------------------------------------------------------------------

def write_results(directory: Path, runs: pd.DataFrame, iters: pd.DataFrame) -> Path:
    (directory / "results").mkdir(parents=True)
    runs.to_parquet(directory / "results" / "runs.parquet")
    iters.to_parquet(directory / "results" / "iterations.parquet")
    return directory


def test_orch_compare_and_check(tmp_path):
    a = write_results(tmp_path / "a", *result_set(1))
    b = write_results(tmp_path / "b", *result_set(2, scale={"t_comm": 2.0}))
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--detail",
                                      "--fail-if-slower"])
    assert result.exit_code == 0, result.output  # one run a side: no verdict it cannot back
    assert f": {compare.UNMEASURED} (throughput B/A 0." in result.output
    assert compare.NEEDS in result.output and "p(worse)=" in result.output
    history = tmp_path / "h"  # three recorded runs of the configuration: their spread
    for seed in (3, 4, 5):
        store.add(history, with_meta(seed), Path(f"/s{seed}"))
    failing = CliRunner().invoke(app, ["compare", str(a), str(b), "--fail-if-slower",
                                       "--history", str(history)])
    assert failing.exit_code == 1, failing.output
    assert "slower" in failing.output and "→ look at the fabric" in failing.output
    assert f"run-to-run spread: history {history} (3 recorded sweep(s))" in failing.output
    assert "(1 vs 1 repeats, against the spread of 3 recorded runs)" in failing.output
    refs = tmp_path / "references.yaml"
    refs.write_text(REFS)
    held = CliRunner().invoke(app, ["check", str(a), "--references", str(refs)])
    assert held.exit_code == 0 and "2 of 2 metric(s) hold" in held.output
    failed = CliRunner().invoke(app, ["check", str(b), "--references", str(refs)])
    assert failed.exit_code == 1 and "FAIL" in failed.output and "t_comm" in failed.output


def test_orch_history_list_show_and_compare_a_selection(tmp_path):
    root = tmp_path / "h"
    e = store.add(root, with_meta(1), Path("/s1"))
    listed = CliRunner().invoke(app, ["history", "list", "--history", str(root)])
    assert listed.exit_code == 0 and e.id in listed.output
    none = CliRunner().invoke(app, ["history", "list", "--history", str(root), "--mode", "x"])
    assert "no recorded sweep matches" in none.output
    shown = CliRunner().invoke(app, ["history", "show", e.id[:12], "--history", str(root)])
    assert shown.exit_code == 0 and "throughput" in shown.output and "abc123" in shown.output
    b = write_results(tmp_path / "b", *result_set(2))
    result = CliRunner().invoke(app, ["compare", "history:mode=torch-ddp", str(b),
                                      "--history", str(root)])
    assert result.exit_code == 0, result.output
    assert "no measured change" in result.output
    assert {json.loads(p.read_text())["id"] for p in (root / "records").iterdir()} == {e.id}


def test_a_change_of_one_window_alone_is_no_measured_change():
    a, b = repeats(1), repeats(2)
    slow = b["metric"] == "samples_per_s"
    b.loc[slow, "value"] = b.loc[slow, "value"] * 0.5  # the plain window alone got slower
    (c,) = compare.compare(a, b)
    assert c.verdict == "no measured change"
    assert "throughput worse, iteration time not" in compare.line(c)


def test_a_slowdown_no_phase_explains_says_so():
    a, b = repeats(1), repeats(2)
    for metric, factor in (("samples_per_s", 0.5), ("t_iter", 2.0)):  # untimed work
        rows = b["metric"] == metric
        b.loc[rows, "value"] = b.loc[rows, "value"] * factor
    (c,) = compare.compare(a, b)
    assert c.verdict == "slower" and c.hint == compare.NO_PHASE


# --- recorded real sweeps ----------------------------------------------------------------

RECORDED = ROOT / "tests" / "fixtures" / "history-identical" / "samples.parquet"


def test_recorded_identical_runs_each_against_the_others_show_no_measured_change():
    # 21 real identical one-run sweeps (machine.txt beside them): each against the 20 others
    # together, as a nightly run against its history. All but one say no measured change;
    # sweep 11 ran while the shared machine's load took it to 686 samples/s (the others
    # 955 to 6,685): slower than the others' spread, for real.
    s = pd.read_parquet(RECORDED)
    found = {i: compare.compare(s[s["sweep"] != i], s[s["sweep"] == i])[0]
             for i in range(21)}
    assert [i for i, c in found.items() if c.verdict != "no measured change"] == [11]
    assert {c.changes["samples_per_s"].unit for c in found.values()} == {"repeat"}


def test_recorded_single_runs_against_each_other_give_no_verdict_they_cannot_back():
    # Runs of one configuration differ 13 to 24 times more than one run's iterations tell
    # (docs/howto/compare.md): one run a side is never called slower or faster; it says
    # what would tell, and a history's spread does.
    s = pd.read_parquet(RECORDED)
    pairs = [(i, j) for i in range(6) for j in range(i + 1, 6)]
    found = [c for i, j in pairs for c in compare.compare(s[s["sweep"] == i],
                                                          s[s["sweep"] == j])]
    assert len(found) == 15 and {c.verdict for c in found} == {
        compare.UNMEASURED, "no measured change"}
    unmeasured = [compare.line(c) for c in found if c.verdict == compare.UNMEASURED]
    assert all("from one run a side's iterations" in line and line.endswith(compare.NEEDS)
               for line in unmeasured), unmeasured
    history = s[s["sweep"] >= 6]  # 15 other runs: their spread backs a verdict
    judged = [c for i, j in pairs for c in compare.compare(
        s[s["sweep"] == i], s[s["sweep"] == j], spread=history)]
    assert {c.verdict for c in judged} <= {"no measured change", "slower", "faster"}
    assert all(c.primary.spread_runs == 15 for c in judged)
    assert "against the spread of 15 recorded runs" in compare.line(judged[0])


# --- real sweeps ------------------------------------------------------------------------

def _orch_sweep(out: Path, *extra: str, env: dict | None = None) -> None:
    """``orch sweep`` of one tiny torch-ddp run at 2 ranks (per value of its --option)."""
    run_orch("sweep", "--model", "lenet5", "--nodes", "2", "--iters", "10", "--warmup", "2",
             "--out", out, *extra, check=True, env=env)


def _part(sweep: Path, out: Path, delayed: bool) -> Path:
    """The run of ``sweep`` with (or without) comm_delay_ms, as a result set of its own."""
    runs = pd.read_parquet(sweep / "results" / "runs.parquet")
    iters = pd.read_parquet(sweep / "results" / "iterations.parquet")
    keep = runs[runs["options"].str.contains("comm_delay_ms") == delayed]  # 0: the default
    assert len(keep) == 1, runs[["run_id", "options"]]
    return write_results(out, keep, iters[iters["run_id"].isin(keep["run_id"])])


@pytest.fixture(scope="module")
def site_sweep(tmp_path_factory):
    """A real sweep of a local site whose config names a history (through a variable), and
    the environment that sets it."""
    root = tmp_path_factory.mktemp("site-history")
    site = root / "local.yaml"
    site.write_text((ROOT / "site-configs" / "local.yaml").read_text()
                    + "history: $ORCH_TEST_HISTORY/nightly\n")
    env = {"ORCH_TEST_HISTORY": str(root)}
    _orch_sweep(root / "sweep", "--site", site, env=env)
    return root / "sweep", root / "nightly", env


@pytest.mark.ranks
def test_gather_records_the_site_history_once_and_rerun_tests_the_spread(site_sweep):
    sweep, history, env = site_sweep
    first = run_orch("gather", sweep, check=True, env=env)
    (entry,) = store.entries(history)[0]
    assert f"recorded in history {history} as {entry.id}\n" in first.stderr, first.stderr
    again = run_orch("gather", sweep, check=True, env=env)
    assert f"already recorded in history {history} as {entry.id}" in again.stderr
    assert [e.id for e in store.entries(history)[0]] == [entry.id]  # nothing rewritten
    run_id = pd.read_parquet(sweep / "results" / "runs.parquet")["run_id"].iloc[0]
    rerun = run_orch("rerun", run_id, sweep, check=True, env=env)
    verdict = next(line for line in rerun.stderr.splitlines()
                   if line.startswith(f"rerun of {run_id}: "))
    # one run each, and the site's history holds one run: inside, or no verdict
    assert re.search(r": (inside the original's spread|spread not measured \(.*\)): "
                     r"throughput rerun/original \d\.\d\d \[\d\.\d\d–\d+\.\d\d\] "
                     r"\(10 vs 10 iterations\)", verdict), verdict
    rerun_dir = Path(rerun.stdout.strip()).parent  # a gather of the rerun says it again
    assert verdict in run_orch("gather", rerun_dir, check=True, env=env).stderr
    # The report reads the history the site names: the rerun, recorded, is a point after it.
    refs = sweep.parent / "refs.yaml"
    refs.write_text("site: local\npartitions:\n  local:\n    - match: {nodes: 2}\n"
                    "      metrics:\n        samples_per_s: {value: 1000, lower: 0.5, "
                    "upper: 9, unit: samples/s}\n")
    report = run_orch("report", sweep, "--references", refs, "--out", sweep.parent / "r",
                      check=True, env=env)
    assert "Against the previous recorded sweep" in report.stdout, report.stdout
    assert "no recorded sweep measured before it" in report.stdout
    assert "trend.png" in (sweep.parent / "r" / "report.md").read_text()


@pytest.mark.ranks
def test_real_sweeps_compare_and_a_slow_fabric_is_found(site_sweep, tmp_path):
    # B: a clean run, then one whose every all-reduce completes 200 ms late (comm_delay_ms: a
    # slow fabric, for real: ten times a lenet5 step here). One run a side: the slow one is
    # far outside its iterations' spread, yet gets no verdict without a run-to-run spread
    # (the change points of a history find it: tests/test_changes.py); a history whose
    # runs of the configuration spread as identical runs do gives one.
    sweep = site_sweep[0]
    _orch_sweep(tmp_path / "b", "--option", "comm_delay_ms=0,200")
    clean = run_orch("compare", sweep, _part(tmp_path / "b", tmp_path / "b-clean", False),
                     "--ignore-option", "comm_delay_ms", check=True)
    assert re.search(r"torch-ddp lenet5 local 2x1 b32 .*: (no measured change|spread not "
                     r"measured) .*\(10 vs 10 iterations\)", clean.stdout), clean.stdout
    slow_part = _part(tmp_path / "b", tmp_path / "b-slow", True)
    slow = run_orch("compare", sweep, slow_part, "--ignore-option", "comm_delay_ms",
                    "--history", tmp_path / "none", check=True)
    # never "slower" from its iterations; which of these two is the shared machine's to say
    assert re.search(r": (spread not measured|no measured change) \(throughput B/A 0\.",
                     slow.stdout), slow.stdout
    history = tmp_path / "h"  # the recorded identical runs: a 200 ms delay is far outside
    recorded = pd.read_parquet(RECORDED)
    for i in range(6):
        store.add(history, recorded[recorded["sweep"] == i].drop(columns="sweep"),
                  Path(f"/recorded/{i}"))
    judged = run_orch("compare", sweep, slow_part, "--ignore-option", "comm_delay_ms",
                      "--history", history, check=True)
    assert ": slower " in judged.stdout and "against the spread of 6" in judged.stdout, \
        judged.stdout
    assert "exposed communication +" in judged.stdout and "look at the fabric" in judged.stdout


def test_orch_history_schema_is_the_references_model():
    result = CliRunner().invoke(app, ["history", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["title"] == "References" and set(schema["required"]) == {"site", "partitions"}


def test_what_differs_between_a_and_b():
    a = with_meta(1)
    b = with_meta(2).assign(commit="def456", versions='{"torch": "2.14.0"}')
    assert compare.what_differs(a, b) == ["orch commit abc123 → def456",
                                          "torch 2.13.0 → 2.14.0"]
    assert compare.what_differs(a, with_meta(2)) == []
    assert compare.what_differs(table(1), table(2)) == []


def test_a_gathered_sweep_is_recorded_once_and_only_when_finished(tmp_path):
    runs = pd.DataFrame({"state": ["COMPLETED", "RUNNING"]})

    def not_built() -> pd.DataFrame:
        raise AssertionError("the sample table of an unfinished sweep is not built")

    line = gathered.record(tmp_path, not_built, Path("/s1"), runs)
    assert line == (f"not recorded in history {tmp_path} yet: 1 run(s) not finished (the "
                    "gather that finds them finished records the sweep)")
    assert store.entries(tmp_path)[0] == []
    done = runs.assign(state=["COMPLETED", "FAILED"])
    first = gathered.record(tmp_path, lambda: with_meta(1), Path("/s1"), done)
    (entry,) = store.entries(tmp_path)[0]
    assert first == f"recorded in history {tmp_path} as {entry.id}"
    # the same sweep directory with other results (a run retried since): not again
    again = gathered.record(tmp_path, lambda: with_meta(2), Path("/s1"), done)
    assert again == f"already recorded in history {tmp_path} as {entry.id} (not recorded again)"
    assert len(store.entries(tmp_path)[0]) == 1


def test_a_site_history_must_be_absolute():
    site = yaml.safe_load((ROOT / "site-configs" / "local.yaml").read_text())
    for good in ("/srv/history", "~/history", "$HOME/history"):
        assert Site.model_validate({**site, "history": good}).history == good
    with pytest.raises(ValidationError, match="give an absolute path"):
        Site.model_validate({**site, "history": "history"})


def test_the_same_run_in_two_recorded_sweeps_is_two_runs(tmp_path):
    store.add(tmp_path, with_meta(1), Path("/s1"))
    store.add(tmp_path, with_meta(2, seed_id=1), Path("/s2"))
    selected = store.select(tmp_path)[0]
    assert selected["run_id"].nunique() == 2  # one run id in both sweeps
    b = pd.concat([table(3), table(4).assign(run_id="other")])
    (c,) = compare.compare(selected, b)
    assert (c.changes["t_iter"].unit, c.changes["t_iter"].n_a) == ("repeat", 2)


def test_a_run_recorded_before_its_mode_declared_a_dimension_meets_todays_runs():
    """A tf-allreduce run recorded when TensorFlow had no precision dimension (null) and one
    recorded at today's default (fp32) are one configuration; another precision is not."""
    def tf(seed, precision):
        return table(seed, mode="tf-allreduce").assign(precision=precision)

    old, new = tf(1, None), tf(2, "fp32")
    assert len(compare.compare(old, new)) == 1
    assert compare.compare(old, tf(3, "bf16")) == []
    gone = samples.with_mode_defaults(old.assign(mode="no-such-mode"))
    assert gone["precision"].isna().all()


def test_a_selection_keeps_only_its_rows_of_an_entry_of_several_sites(tmp_path):
    both = pd.concat([with_meta(1), with_meta(2, site="other")], ignore_index=True)
    e = store.add(tmp_path, both, Path("/s1"))
    assert e.site == ["local", "other"]
    selected, used, _ = store.select(tmp_path, site="other", mode="torch-ddp")
    assert [u.id for u in used] == [e.id] and set(selected["site"]) == {"other"}
    assert len(selected) == (both["site"] == "other").sum()
    assert selected["run_id"].str.startswith(e.id + "/").all()
    assert store.select(tmp_path, site="other", mode="horovod")[0].empty


def test_orch_compare_reads_a_and_b_from_two_histories(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for seed in (1, 2):
        store.add(a, with_meta(seed), Path(f"/a{seed}"))
        store.add(b, with_meta(seed + 10), Path(f"/b{seed}"))
    result = CliRunner().invoke(app, ["compare", "history:", "history:", "--history", str(a),
                                      "--history-b", str(b)])
    assert result.exit_code == 0, result.output
    assert f"A: history: (2 sweep(s) of {a})" in result.output
    assert f"B: history: (2 sweep(s) of {b})" in result.output
    assert "(2 vs 2 repeats)" in result.output


def test_orch_compare_of_two_histories_imports_no_plotting_and_no_report(tmp_path):
    """What the command reads of a history is samples: the plotting library, the report and
    the run directories' provenance (the site, the renderer) would be start-up for nothing."""
    store.add(tmp_path, with_meta(1), Path("/s1"))
    store.add(tmp_path, with_meta(2), Path("/s2"))
    script = ("import sys\nfrom orchestrator.cli import main\n"
              f"sys.argv = ['orch', 'compare', 'history:', 'history:', '--history', "
              f"{str(tmp_path)!r}]\n"
              "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
              "print(' '.join(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.splitlines()[-1].split())
    assert "no measured change" in proc.stdout and "orchestrator.history.compare" in loaded
    for heavy in ("matplotlib", "scipy", "orchestrator.report", "orchestrator.runs.provenance",
                  "orchestrator.render"):
        assert not {m for m in loaded if m == heavy or m.startswith(heavy + ".")}, heavy
