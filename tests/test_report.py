"""``orch report`` and ``orch export``, the report's pure functions, and the fast merge.

* The fast merge (tables.merged_iteration_table + numpy run_metrics) must give exactly the
  result set the row-by-row path gives, on every kind of rank log: harness logs, torn and
  footer-less logs, other writers' key order, nulls, blank lines, missing fields.
* The report's pure functions on hand-made result sets: predictions, stragglers, tables.
* A real local sweep (2 runs + an all-reduce benchmark in the same directory) through the CLI:
  files, PNGs (valid images, the colours of what they must show), HTML self-contained, the
  predicted speedup next to the measured one for every run, exported Parquet.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator import protocol, report, results
from orchestrator.history import references, store
from orchestrator.perfmodel import AlphaBeta, allreduce_time
from orchestrator.report import overview, trend
from orchestrator.results import analyze, gather, resultset
from orchestrator.results import iterations as tables
from orchestrator.runs import rundir
from orchestrator.runs.rundir import JobRecord
from orchestrator.spec.api import Run

from .conftest import run_orch
from .test_history import table
from .test_netbench import LOCAL_ITERS, SIZES

approx = pytest.approx

# ================================================================ the merge: fast == exact


def make_run(out, nodes=2, iters=3, warmup=1, **kw):
    run = Run(site="x", scheduler="local", partition="p", interconnect="ethernet",
              mode="torch-ddp", framework="torch", launcher="local", model="lenet5",
              dataset="cifar", nodes=nodes, tasks_per_node=1, batch_size=8, iters=iters,
              warmup=warmup, repeat=kw.pop("repeat", 0), time_limit_min=5, **kw)
    rdir = out / run.run_id
    (rdir / "ranks").mkdir(parents=True)
    (rdir / "run.json").write_text(run.model_dump_json())
    rundir.write_record(rdir, JobRecord(run_id=run.run_id, scheduler="local",
                                        state="COMPLETED"))
    return run, rdir


def dumps(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))  # as the harness writes


def header(rank: int) -> str:
    return dumps({"type": "header", "rank": rank, "host": f"h{rank}", "node": f"n{rank}",
                  "node_rank": rank, "env": {"A": "1"}, "argv": ["x", "--y"]})


def iteration(it: int, rng, warmup: int = 1, **extra) -> dict:
    rec = {"type": "iter", "iter": it, "warmup": it < warmup, "t_start": 1.7e9 + it * 0.01
           + rng.random() * 1e-3, "t_iter": rng.random() * 1e-2, "samples": 8}
    for p in ("t_io", "t_h2d", "t_f", "t_b", "t_comm", "t_u"):
        rec[p] = rng.random() * 1e-3
    rec["t_comm_total"] = rng.random() * 1e-3
    rec.update(extra)
    return rec


FOOTER = dumps({"type": "footer", "status": "ok", "error": None, "peak_rss_bytes": 123,
                "param_checksum": 1.5, "versions": {"python": "3.11"}})


def slow_result_set(out):
    """The row-by-row merge orch had before: read_rank_log + iteration_rows + from_pylist."""
    rows, metrics = [], {}
    for rdir in rundir.run_dirs(out):
        run = rundir.read_run(rdir)
        run_rows = tables.iteration_rows(run, gather.read_run_logs(rdir))
        rows += run_rows
        frame = pd.DataFrame(run_rows, columns=tables.ITER_SCHEMA.names)
        # Logs of two windows: throughput from the native window, phases from the
        # breakdown window, as analyze defines them; one window: the groupby reference.
        two = (frame["window"] == protocol.WINDOW_NATIVE).any()
        metrics[run.run_id] = (analyze.run_metrics(frame) if two
                               else reference_run_metrics(frame))
    return tables.iteration_table(rows), metrics


def reference_run_metrics(iters: pd.DataFrame) -> dict:
    """analyze.run_metrics as it was written with pandas groupby (before the numpy rewrite)."""
    m = iters[~iters["warmup_iter"]] if not iters.empty else iters
    if m.empty:
        return {**dict.fromkeys(analyze.METRICS), "iterations_measured": 0}
    ends = m["t_start"] + m["t_iter"]
    per_rank = m.assign(end=ends).groupby("rank").agg(first=("t_start", "min"),
                                                      last=("end", "max"))
    window = float((per_rank["last"] - per_rank["first"]).max())
    samples = int(m["samples"].sum())
    per_iter = m.groupby("iter").agg(samples=("samples", "sum"), slowest=("t_iter", "max"))
    rates = per_iter["samples"] / per_iter["slowest"]
    return {"iterations_measured": int(m.groupby("rank")["iter"].count().min()),
            "samples_per_s": samples / window if window > 0 else None,
            "samples_per_s_std": float(rates.std(ddof=1)) if len(rates) > 1 else 0.0}


def iterations_table(out):
    """``results/iterations.parquet`` of a sweep directory as one table: its runs' files in
    the runs' order, each holding its run's rows only."""
    found = resultset.table_files(out / resultset.ITERATIONS)
    pieces = [pq.read_table(path) for path in found]
    for path, piece in zip(found, pieces, strict=True):
        assert set(piece.column("run_id").to_pylist()) <= {path.stem}, path
    return pa.concat_tables(pieces) if pieces else tables.iteration_table([])


def check_merge(out):
    runs = results.merge(out)
    fast = iterations_table(out)
    slow, metrics = slow_result_set(out)
    assert fast.schema.equals(tables.ITER_SCHEMA)
    assert fast.equals(slow), (fast.to_pandas().compare(slow.to_pandas())
                               if fast.num_rows == slow.num_rows else (fast.num_rows,
                                                                       slow.num_rows))
    for _, r in runs.iterrows():
        ref = metrics[r["run_id"]]
        for key, value in ref.items():
            got = r[key]
            if value is None:
                assert got is None or (isinstance(got, float) and math.isnan(got)), key
            else:
                assert got == value, (key, got, value)  # bit for bit, not approx
    return runs, fast


def test_fast_merge_equals_exact_merge_on_harness_logs(tmp_path):
    rng = np.random.default_rng(1)
    out = tmp_path / "sweep"
    for nodes in (1, 2, 4):
        _, rdir = make_run(out, nodes=nodes, iters=20, warmup=3)
        for rank in range(nodes):
            lines = [header(rank)] + [dumps(iteration(i, rng, warmup=3, allreduce_1024=1e-5))
                                      for i in range(23)] + [FOOTER]
            (rdir / "ranks" / f"rank-{rank}.jsonl").write_text("\n".join(lines) + "\n")
    runs, fast = check_merge(out)
    assert fast.num_rows == 23 * 7
    assert set(runs["iterations_measured"]) == {20}


def test_fast_merge_equals_exact_merge_on_odd_logs(tmp_path):
    rng = np.random.default_rng(2)
    out = tmp_path / "sweep"
    _, a = make_run(out, nodes=4, iters=3)
    ranks = a / "ranks"
    # rank 0: killed mid-write (torn last line, no footer)
    lines = [header(0)] + [dumps(iteration(i, rng)) for i in range(3)]
    (ranks / "rank-0.jsonl").write_text("\n".join(lines) + '\n{"type":"iter","iter":3,"war')
    # rank 1: another writer's key order (json.loads path for this log only)
    recs = [iteration(i, rng) for i in range(4)]
    lines = [header(1)] + [json.dumps(dict(reversed(list(r.items())))) for r in recs]
    (ranks / "rank-1.jsonl").write_text("\n".join([*lines, FOOTER]) + "\n")
    # rank 2: no samples and no t_comm_total key (defaults: batch size, null), no warmup key
    recs = [iteration(i, rng) for i in range(4)]
    for r in recs:
        del r["samples"], r["t_comm_total"], r["warmup"]
    (ranks / "rank-2.jsonl").write_text("\n".join([header(2), *map(dumps, recs), FOOTER]))
    # rank 3: keys in another order on one line only (the CSV check fails for its group)
    recs = [iteration(i, rng) for i in range(4)]
    recs[2] = {"type": "iter", **{k: v for k, v in reversed(list(recs[2].items()))
                                  if k != "type"}}
    (ranks / "rank-3.jsonl").write_text("\n".join([header(3), *map(dumps, recs), FOOTER]))
    # a second run: an explicit null phase, a blank line, a header-only log, a log with
    # iterations but without header
    _, b = make_run(out, nodes=4, iters=3, repeat=1)
    recs = [iteration(i, rng) for i in range(4)]
    recs[1]["t_io"] = None
    (b / "ranks" / "rank-0.jsonl").write_text("\n".join([header(0), *map(dumps, recs), FOOTER]))
    recs = [dumps(iteration(i, rng)) for i in range(4)]
    (b / "ranks" / "rank-1.jsonl").write_text("\n".join([header(1), recs[0], "", *recs[1:],
                                                         FOOTER]) + "\n")
    (b / "ranks" / "rank-2.jsonl").write_text(header(2) + "\n")
    (b / "ranks" / "rank-3.jsonl").write_text("\n".join(dumps(iteration(i, rng))
                                                        for i in range(4)))
    runs, fast = check_merge(out)
    assert fast.num_rows == 3 + 4 + 4 + 4 + 4 + 4 + 0 + 4
    rank2 = fast.to_pandas().query("rank == 2 and iter >= 0")
    assert set(rank2[rank2["run_id"] == runs["run_id"].iloc[0]]["samples"]) >= {8}


def test_fast_merge_of_runs_without_logs(tmp_path):
    out = tmp_path / "sweep"
    make_run(out, nodes=1)
    runs, fast = check_merge(out)
    assert fast.num_rows == 0 and runs["iterations_measured"].tolist() == [0]


def test_numpy_run_metrics_equal_pandas_groupby_bit_for_bit():
    rng = np.random.default_rng(3)
    for ranks, n_iter in ((1, 5), (3, 40), (8, 200)):
        rows = [{"rank": r, "host": f"h{r}", "iter": i, "warmup_iter": i < 2,
                 "t_start": 1.7e9 + i * 0.02 + rng.random() * 1e-3,
                 "t_iter": rng.lognormal(-4, 0.5), "samples": int(rng.integers(1, 64)),
                 **{p: rng.random() for p in gather.PHASES}, "t_comm_total": rng.random()}
                for r in range(ranks) for i in range(n_iter)]
        df = pd.DataFrame(rows).sample(frac=1.0, random_state=1)  # any row order
        new, ref = analyze.run_metrics(df), reference_run_metrics(df)
        for key, value in ref.items():
            assert new[key] == value, key


def test_a_mode_without_samples_has_no_throughput():
    df = pd.DataFrame([{"rank": 0, "host": "h", "iter": i, "warmup_iter": False,
                        "t_start": 1.0 + i, "t_iter": 0.5, "samples": 0,
                        **dict.fromkeys(gather.PHASES, 0.1), "t_comm_total": 0.1}
                       for i in range(3)])
    m = analyze.run_metrics(df)
    assert m["samples_per_s"] is None and m["samples_per_s_std"] is None
    assert m["t_iter"] == approx(0.5)


# ================================================================ pure functions of the report

PHASES_1 = {"t_io": 0.001, "t_h2d": 0.0, "t_f": 0.004, "t_b": 0.005, "t_comm": 0.001,
            "t_u": 0.001}  # t_iter(1) = 0.012


def synthetic_runs(model="lenet5", partition="p", failed=False):
    rows = []
    for nodes, t_comm, speedup in ((1, 0.001, 1.0), (2, 0.004, 1.6), (4, 0.009, 2.4)):
        row = {"run_id": f"r-{partition}-{nodes}", "site": "s", "partition": partition,
               "interconnect": "ethernet", "mode": "torch-ddp", "framework": "torch",
               "launcher": "local", "model": model, "dataset": "cifar", "nodes": nodes,
               "tasks_per_node": 1, "ranks": nodes, "batch_size": 32, "iters": 4, "warmup": 1,
               "repeat": 0, "options": '{"backend": "gloo"}', "state": "COMPLETED",
               "reason": None, "samples_per_s": 2000.0 * speedup, "samples_per_s_std": 50.0,
               **PHASES_1, "t_comm": t_comm, "t_comm_total": t_comm * 0.9,
               **{f"{p}_std": 1e-4 for p in gather.PHASES}, "t_iter_std": 1e-4,
               "t_unaccounted": 0.0, "speedup": speedup, "efficiency": speedup / nodes}
        row["t_iter"] = sum(row[p] for p in gather.PHASES)
        rows.append(row)
    if failed:
        rows.append({**rows[-1], "run_id": f"r-{partition}-8", "nodes": 8, "ranks": 8,
                     "state": "FAILED", "reason": "rank 3: boom\ntrace", "t_iter": None,
                     "samples_per_s": None, "speedup": None, "efficiency": None})
    return pd.DataFrame(rows)


def synthetic_iters(runs, slow_rank=None):
    rows = []
    for _, r in runs[runs["state"] == "COMPLETED"].iterrows():
        for rank in range(int(r["ranks"])):
            factor = 1.3 if (slow_rank is not None and rank == slow_rank
                             and r["ranks"] > 1) else 1.0
            for it in range(5):
                rows.append({"run_id": r["run_id"], "rank": rank, "host": f"node{rank}",
                             "iter": it, "warmup_iter": it == 0, "t_start": 1.0 + it,
                             "t_iter": r["t_iter"] * (0.9 + 0.05 * it), "samples": 32,
                             **{p: r[p] * (factor if p in report.COMPUTE else 1.0)
                                for p in gather.PHASES}, "t_comm_total": r["t_comm_total"]})
    return pd.DataFrame(rows)


def no_netbench(site, partition):
    return report.CommModel(None, "no netbench result")


def test_predictions_with_measured_comm_by_hand():
    runs = synthetic_runs()
    preds = report.predictions(runs, no_netbench).set_index("run_id")
    # Compute from the 1-node run (0.011 s) + the communication measured at N.
    assert preds.loc["r-p-2", "predicted_t_iter"] == approx(0.011 + 0.004)
    assert preds.loc["r-p-4", "predicted_speedup"] == approx(4 * 0.012 / 0.020)
    assert preds.loc["r-p-4", "residual_speedup"] == approx(2.4 - 4 * 0.012 / 0.020)
    assert preds.loc["r-p-1", "predicted_speedup"] == approx(1.0)
    assert set(preds["comm_model"]) == {"measured"}


def test_predictions_with_alpha_beta_by_hand():
    runs = synthetic_runs()
    ab = AlphaBeta(alpha=1e-4, bandwidth=1e8)
    preds = report.predictions(runs, lambda s, p: report.CommModel(ab, "file")).set_index(
        "run_id")
    grad = report.gradient_bytes("lenet5", "cifar")
    # lenet5's gradient (< 1 MiB) is one DDP bucket: sent after backward (overlap none).
    assert preds.loc["r-p-4", "overlap"] == "none"
    comm4 = 0.001 + allreduce_time(grad, 4, 1e-4, 1e8)
    assert preds.loc["r-p-4", "t_comm_predicted"] == approx(comm4)
    assert preds.loc["r-p-4", "predicted_speedup"] == approx(4 * 0.012 / (0.011 + comm4))
    assert set(preds["comm_model"]) == {"α–β"}


def test_stragglers_flag_the_slow_rank():
    runs = synthetic_runs()
    stats = report.stragglers(report.rank_stats(synthetic_iters(runs, slow_rank=2)))
    by = stats.set_index("run_id")
    assert bool(by.loc["r-p-4", "straggler"]) and by.loc["r-p-4", "slowest_rank"] == 2
    assert by.loc["r-p-4", "excess"] == approx(0.3, rel=0.01)
    assert not bool(by.loc["r-p-1", "straggler"])
    even = report.stragglers(report.rank_stats(synthetic_iters(runs)))
    assert not even["straggler"].any()


def test_build_tables_labels_failed_runs_and_netbench_runs():
    runs = pd.concat([synthetic_runs("lenet5", "ib", failed=True),
                      synthetic_runs("lenet5", "eth")], ignore_index=True)
    bench = runs.iloc[[1]].assign(run_id="bench", mode="allreduce-bench", samples_per_s=None,
                                  speedup=None, efficiency=None)
    runs = pd.concat([runs, bench], ignore_index=True)
    rep = report.build(runs, synthetic_iters(runs, slow_rank=3), no_netbench, figures=False)
    tables = {t.key: t for t in rep.tables}
    assert set(tables) >= {"throughput", "speedup", "prediction", "phases", "communication",
                           "ranks", "network", "failed"}
    assert [row[0] for row in tables["throughput"].rows] == ["torch-ddp lenet5 eth",
                                                             "torch-ddp lenet5 ib"]
    assert tables["throughput"].columns == ["configuration", "1 node", "2 nodes", "4 nodes"]
    assert tables["speedup"].rows[0][3] == "2.40 (60%)"
    assert len(tables["prediction"].rows) == 7  # every training run, the failed one too
    failed = [row for row in tables["prediction"].rows if row[1] == "8"]
    assert failed[0][-1] == "not predicted: run FAILED"
    assert tables["failed"].rows == [["r-ib-8", "FAILED", "rank 3: boom"]]
    assert all("allreduce-bench" not in str(row) for t in rep.tables
               if t.key not in ("failed", "network") for row in t.rows)
    straggler = [row for row in tables["ranks"].rows if row[1] == "4"]
    assert all(row[-1].startswith("rank 3 (node3): compute +30%") for row in straggler)
    assert any("Straggler at 4 nodes: rank 3" in line for line in rep.notes)
    # the summary is a few lines over the sweep; the overview a row per configuration
    assert 3 <= len(rep.summary) <= 5
    assert rep.summary[0].startswith("6 completed training run(s) of 2 configuration(s)")
    assert "1 did not complete" in rep.summary[0]
    assert [row[0] for row in rep.overview.rows] == ["torch-ddp lenet5 eth",
                                                     "torch-ddp lenet5 ib"]
    md, page = report.to_markdown(rep), report.to_html(rep)
    assert "| configuration | 1 node | 2 nodes | 4 nodes |" in md
    assert "<table>" in page and "rank 3: boom" in page
    # the summary and the overview come first, the detail tables folded after them
    assert md.index("## Summary") < md.index("## Each configuration at a glance") < md.index(
        "<details><summary>Detail: ") < md.index("## Throughput (samples/s")
    assert page.index("Each configuration at a glance") < page.index("<details>")


def test_flagged_reasons_are_said_once_with_their_runs():
    cores = "assumption broken: 4 ranks on 2 cores"
    fit = ("network model unreliable: R² = -0.016, worst residual 80% (inter fit; needs R² ≥ "
           "0.9 and worst residual ≤ 50%)")  # a flag whose own words hold "; "
    card = pd.DataFrame([
        {"run_id": f"{m}-n{n}", "mode": m, "nodes": n, "workers": n, "error_t_iter": 0.3,
         "valid": n < 4, "flags": cores if n == 4 else ""}
        for m in ("horovod", "torch-ddp") for n in (1, 2, 4)])
    card.loc[card["run_id"] == "torch-ddp-n4", "flags"] = f"{fit}; {cores}"
    assert overview.flagged_groups(card) == [(cores, ["horovod-n4", "torch-ddp-n4"]),
                                             (fit, ["torch-ddp-n4"])]


def png_pixels(data: bytes):
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.verify()  # a valid PNG (raises otherwise)
    img = Image.open(io.BytesIO(data)).convert("RGB")
    return img, np.asarray(img).reshape(-1, 3)


def has_color(pixels, hex_color: str, min_pixels: int = 50) -> bool:
    rgb = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels.astype(int) - rgb).sum(axis=1) <= 6).sum()) >= min_pixels


def test_figures_show_what_they_must():
    runs = pd.concat([synthetic_runs("lenet5", "ib"), synthetic_runs("lenet5", "eth")],
                     ignore_index=True)
    rep = report.build(runs, synthetic_iters(runs, slow_rank=1), no_netbench)
    assert set(rep.figures) == {"throughput.png", "speedup.png", "phases.png", "ranks.png"}
    _, px = png_pixels(rep.figures["throughput.png"])
    # one colour per configuration (eth first, ib second), lines and ideal lines
    assert has_color(px, report.CONFIG_COLORS[0]) and has_color(px, report.CONFIG_COLORS[1])
    img, px = png_pixels(rep.figures["phases.png"])
    for phase in ("t_f", "t_b", "t_comm", "t_u"):  # the visible phases are stacked
        assert has_color(px, report.PHASE_COLORS[phase], 200), phase
    assert img.width > img.height  # 6 bars side by side
    img, px = png_pixels(rep.figures["ranks.png"])
    assert has_color(px, "#aec7e8", 200) and has_color(px, "#f4a3a3", 200)  # straggler box
    assert img.height >= 2 * 300  # 6 runs: two rows of panels
    _, px = png_pixels(rep.figures["speedup.png"])
    assert has_color(px, report.CONFIG_COLORS[0])


# ================================================================ a real local sweep, via the CLI


@pytest.fixture(scope="module")
def real_sweep(tmp_path_factory):
    """torch-ddp at 1 and 2 nodes, and an all-reduce benchmark run in the same directory."""
    out = tmp_path_factory.mktemp("report-sweep")
    store = tmp_path_factory.mktemp("empty-store")
    env = {"ORCH_NETBENCH_DIR": str(store)}
    run_orch("sweep", "--nodes", "1,2", "--iters", 4, "--warmup", 1, "--out", out,
             check=True, env=env)
    # test_netbench's sizes and iterations: a span and a median that a loaded machine's
    # noise cannot reorder (with 256 KiB and 1 MiB alone, 3 iterations, it once did)
    run_orch("netbench", "--site", "local", "--nodes", 2, "--iters", LOCAL_ITERS, "--warmup",
             1, "--sizes", SIZES, "--reps", 3, "--out", out, "--no-save", check=True, env=env)
    proc = run_orch("report", out, check=True, env=env)
    return out, proc, env


@pytest.mark.ranks
def test_report_prints_tables_and_writes_files(real_sweep):
    out, proc, _ = real_sweep
    for title in ("Throughput (samples/s", "Speedup vs the 1-node run", "Measured vs predicted",
                  "Phase breakdown", "Communication: exposed vs total", "Per-rank spread",
                  "Network model per partition"):
        assert title in proc.stdout
    assert "netbench run allreduce-bench-lenet5-local-n2" in proc.stdout
    files = {p.name for p in (out / "report").iterdir()}
    assert files == {"report.md", "report.html", "throughput.png", "speedup.png",
                     "phases.png", "ranks.png", "devices.png"}  # devices: each rank's CPU use
    for name in ("throughput.png", "speedup.png", "phases.png", "ranks.png", "devices.png"):
        img, px = png_pixels((out / "report" / name).read_bytes())
        assert img.width >= 600 and img.height >= 300
        assert len(np.unique(px, axis=0)) > 20  # not blank
    _, px = png_pixels((out / "report" / "phases.png").read_bytes())
    assert has_color(px, report.PHASE_COLORS["t_f"], 200)
    assert has_color(px, report.PHASE_COLORS["t_b"], 200)


@pytest.mark.ranks
def test_html_is_self_contained_and_markdown_links_the_plots(real_sweep):
    out, _, _ = real_sweep
    page = (out / "report" / "report.html").read_text()
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)">', page)
    assert len(images) == 5
    embedded = {base64.b64decode(data) for data in images}
    assert embedded == {(out / "report" / n).read_bytes() for n in
                        ("throughput.png", "speedup.png", "phases.png", "ranks.png",
                         "devices.png")}
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing loaded from elsewhere
    md = (out / "report" / "report.md").read_text()
    for name in ("throughput.png", "speedup.png", "phases.png", "ranks.png", "devices.png"):
        assert f"](./{name})" in md


@pytest.mark.ranks
def test_every_run_has_predicted_next_to_measured_speedup(real_sweep):
    out, _, _ = real_sweep
    from orchestrator.execute import netbench

    runs = pd.read_parquet(out / "results" / "runs.parquet")
    train = runs[runs["mode"] == "torch-ddp"]
    bench = runs[runs["mode"] == "allreduce-bench"]
    assert len(train) == 2 and len(bench) == 1
    assert bench["samples_per_s"].isna().all() and bench["speedup"].isna().all()
    fit = netbench.in_sweep(out, "local", "local")
    assert fit is not None and fit.workers == 2
    preds = report.predictions(runs, lambda s, p: report.CommModel(fit.alpha_beta, "sweep"))
    preds = preds.set_index("run_id")
    one = train[train["nodes"] == 1].iloc[0]
    two = train[train["nodes"] == 2].iloc[0]
    grad = report.gradient_bytes("lenet5", "cifar")
    compute = sum(float(one[p]) for p in ("t_io", "t_h2d", "t_f", "t_b", "t_u"))
    comm2 = float(one["t_comm"]) + allreduce_time(grad, 2, fit.alpha, fit.bandwidth)
    expected = 2 * (compute + float(one["t_comm"])) / (compute + comm2)
    assert preds.loc[two["run_id"], "predicted_speedup"] == approx(expected)
    assert preds.loc[two["run_id"], "residual_speedup"] == approx(two["speedup"] - expected)
    md = (out / "report" / "report.md").read_text()
    section = md.split("## Measured vs predicted")[1].split("##")[0]
    rows = [line for line in section.splitlines() if line.startswith("| torch-ddp")]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[1].strip("|").split("|")]
    assert cells[1] == "2" and cells[4] == f"{expected:.2f}" and cells[11] == "α–β"
    assert cells[5] == f"{two['speedup'] - expected:+.2f}"


@pytest.mark.ranks
def test_report_options_and_errors(real_sweep, tmp_path):
    out, _, env = real_sweep
    target = tmp_path / "elsewhere"
    run_orch("report", out / "results", "--out", target, "--no-plots", check=True, env=env)
    assert {p.name for p in target.iterdir()} == {"report.md", "report.html"}
    proc = run_orch("report", tmp_path / "missing")
    assert proc.returncode == 2 and "no such directory" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_orch("report", out, "--netbench", tmp_path / "none.json")
    assert proc.returncode == 2 and "--netbench" in proc.stderr


@pytest.mark.ranks
def test_export_parquet_opens_in_pandas_and_duckdb(real_sweep, tmp_path):
    out, _, _ = real_sweep
    target = tmp_path / "runs.parquet"
    run_orch("export", out, "--format", "parquet", "--output", target, check=True)
    df = pd.read_parquet(target)
    assert df.equals(pd.read_parquet(out / "results" / "runs.parquet"))
    iters = tmp_path / "iters.parquet"
    run_orch("export", out, "--table", "iterations", "--output", iters, check=True)
    assert pq.read_schema(iters).equals(tables.ITER_SCHEMA)
    csv = run_orch("export", out, "--format", "csv", check=True).stdout
    assert csv.splitlines()[0].startswith("run_id,")
    proc = run_orch("export", out, "--format", "xlsx")
    assert proc.returncode == 2 and "valid: parquet, csv, json" in proc.stderr
    import duckdb  # a test dependency (pyproject [test]): this check always runs
    con = duckdb.connect()
    n, modes = con.execute(f"SELECT count(*), count(DISTINCT mode) FROM '{target}'").fetchone()
    assert (n, modes) == (3, 2)
    rows = con.execute(f"SELECT count(*) FROM '{iters}' WHERE NOT warmup_iter").fetchone()[0]
    assert rows == int((~pd.read_parquet(iters)["warmup_iter"]).sum())


# --- the history part (report.trend): the trend over a history's recorded sweeps, with the
# reference band, and the comparison with the previous recorded sweep; on tests/test_history.py's
# synthetic result sets.

DAY = 86400.0
# orch report with a history, from the site config, and references: tests/test_history.py's
# test_gather_records_the_site_history_once_and_rerun_tests_the_spread (a real sweep).
REFS = """\
site: local
partitions:
  local:
    - match: {mode: torch-ddp, nodes: 2}
      metrics:
        samples_per_s: {value: 1500, lower: 0.2, upper: 0.3, unit: samples/s}
"""


def recorded_history(root: Path, days: list[float], scale: dict | None = None) -> None:
    """A history of one recorded sweep of one run per day (measured that many days ago)."""
    for i, day in enumerate(days):
        t = table(100 + i, seed_id=100 + i, scale=scale if i == len(days) - 1 else None)
        store.add(root, t.assign(commit="abc", dirty=False, image_digest="",
                                 measured_at=1.7e9 - day * DAY), Path(f"/sweeps/{i}"))


def history_view(root: Path, refs: references.References | None = None) -> trend.History:
    samples, used, _ = store.select(root)
    return trend.History(samples, used, measured_at=1.7e9, sweep="/sweeps/this",
                         references=refs)


def test_the_previous_sweep_is_the_latest_measured_before(tmp_path):
    # the last of ten had a slow fabric; one run a sweep: the history's runs give the spread
    recorded_history(tmp_path, list(range(10, 0, -1)), scale={"t_comm": 3.0})
    tables, figures, _ = trend.section(history_view(tmp_path), table(7), figures=False)
    (t,) = tables
    (row,) = t.rows
    assert row[0] == "torch-ddp lenet5 local 2x1 b32 backend=gloo"
    entries = store.entries(tmp_path)[0]
    assert row[1].startswith(entries[-1].id)  # the latest before this sweep
    assert row[2].startswith("faster ")  # this sweep against the slow one
    assert "exposed communication" in row[4] and "fabric" in row[4]
    assert figures == {}


def test_a_sweep_with_no_earlier_recorded_sweep_says_so(tmp_path):
    recorded_history(tmp_path, [1])
    later = history_view(tmp_path)
    earlier = trend.History(later.samples, later.entries, measured_at=1.7e9 - 5 * DAY)
    (t,), _, _ = trend.section(earlier, table(7), figures=False)
    assert t.rows[0][2] == "no recorded sweep measured before it"


def test_trend_points_and_the_reference_band(tmp_path):
    recorded_history(tmp_path, [3, 2, 1])
    refs_file = tmp_path / "refs.yaml"
    refs_file.write_text(REFS)
    v = history_view(tmp_path, references.load(refs_file))
    series = trend.trend_series(v, table(7), v.measured_at)
    ((at, values, band),) = series.values()
    assert at == [1.7e9 - 3 * DAY, 1.7e9 - 2 * DAY, 1.7e9 - DAY, 1.7e9]  # this sweep last
    assert len(values) == 4 and all(v > 0 for v in values)
    assert band == (1500 * 0.8, 1500 * 1.3)
    png = trend.figure(series)
    assert png is not None and png.startswith(b"\x89PNG")


def test_the_trend_marks_where_the_level_changed_and_what_changed(tmp_path):
    for i in range(8):  # the fabric 3 times slower from the fifth recorded sweep on
        t = table(100 + i, seed_id=100 + i, scale={"t_comm": 3.0} if i >= 4 else None)
        store.add(tmp_path, t.assign(commit="abc" if i < 4 else "def", dirty=False,
                                     image_digest="", measured_at=1.7e9 - (8 - i) * DAY),
                  Path(f"/sweeps/{i}"))
    v = history_view(tmp_path)
    ((at, text),) = trend.change_marks(v)["torch-ddp lenet5 local 2x1 b32 backend=gloo"]
    assert at == 1.7e9 - 4 * DAY
    assert re.fullmatch(r"-\d\d %: orch commit abc → def", text), text
    png = trend.figure(trend.trend_series(v, table(7), v.measured_at), trend.change_marks(v))
    assert png is not None and png.startswith(b"\x89PNG")


def test_no_band_where_no_reference_applies(tmp_path):
    refs = references.References.model_validate(
        {"site": "local", "partitions": {"local": [{"match": {"nodes": 4}, "metrics": {
            "samples_per_s": {"value": 1, "lower": 0, "upper": 0, "unit": "samples/s"}}}]}})
    key = {"site": "local", "partition": "local", "mode": "torch-ddp", "nodes": 2,
           "options": "{}"}
    assert references.band(refs, key, "samples_per_s") is None
    assert references.band(refs, {**key, "nodes": 4}, "samples_per_s") == (1.0, 1.0)
    assert references.band(refs, {**key, "nodes": 4}, "t_iter") is None


def test_a_run_recorded_before_its_mode_declared_a_dimension_is_the_previous_sweep(tmp_path):
    """A tf-allreduce sweep recorded when TensorFlow had no precision (null) is the previous
    sweep of today's at the default (fp32), as orch compare matches them."""
    t = table(100, seed_id=100, mode="tf-allreduce").assign(precision=None)
    store.add(tmp_path, t.assign(commit="abc", dirty=False, image_digest="",
                                 measured_at=1.7e9 - DAY), Path("/sweeps/0"))
    today = table(7, mode="tf-allreduce").assign(precision="fp32")
    (t,), _, _ = trend.section(history_view(tmp_path), today, figures=False)
    assert t.rows[0][1].startswith(store.entries(tmp_path)[0][0].id)


def test_a_figure_of_runs_shows_each_size_once_by_its_median_repeat():
    from orchestrator.report import plots

    done = pd.DataFrame({"_label": ["a"] * 5, "nodes": [1, 1, 1, 2, 2], "ranks": [1, 1, 1, 2, 2],
                         "repeat": [0, 1, 2, 0, 1], "run_id": list("vwxyz"),
                         "samples_per_s": [30.0, 10.0, 20.0, 5.0, 7.0]})
    assert list(plots.median_repeats(done)["run_id"]) == ["x", "y"]
    shown, note = plots._few_runs(done, 40)
    assert list(shown["run_id"]) == ["x", "y"] and "median" in note
    single = done.drop_duplicates(["nodes"])
    assert plots.median_repeats(single) is single
