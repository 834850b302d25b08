"""Change points in the history (orchestrator/history/changes.py), the JUnit reports of
``orch check`` and ``orch history changes``, and the store shared by a team: on synthetic
series and histories, and end to end on real local sweeps."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.history import changes, junit, store
from orchestrator.history.settings import Settings

from .conftest import run_orch
from .test_history import REFS, result_set, table, write_results

# --- the detection on series ---------------------------------------------------------------


def test_one_shift_is_found_where_the_new_level_starts():
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 0.02, 40)
    x[25:] += 0.10  # a 10 % slowdown, five standard deviations of one point
    assert changes.change_points(x) == [25]


def test_a_series_of_one_level_has_no_change_point():
    rng = np.random.default_rng(2)
    found = [p for seed in range(20) for p in changes.change_points(
        np.random.default_rng(seed).normal(0.0, 0.05, 40))]
    assert len(found) <= 2, found  # about 0.3 % of 800 points at the default p
    assert changes.change_points(rng.normal(0.0, 0.05, 5)) == []  # too short to split


def test_two_shifts_and_the_minimums():
    x = np.r_[np.zeros(10), np.full(10, 0.3), np.full(10, 0.1)] + np.tile(
        [0.01, -0.01], 15)
    assert changes.change_points(x) == [10, 20]
    # a shift under min_magnitude is none, however sure; a level of two entries is none
    assert changes.change_points(x, Settings(min_magnitude=0.5)) == []
    late = np.r_[np.zeros(10), [0.5, 0.5]] + np.tile([0.01, -0.01], 6)
    assert 10 not in changes.change_points(late)  # two entries are not a level
    assert changes.change_points(late, Settings(min_segment=2)) == [10]


def test_the_split_is_e_divisives_best_split():
    # Q̂ of E-divisive (Matteson and James 2014, α = 1), summed by brute force
    rng = np.random.default_rng(3)
    x = np.r_[rng.normal(0, 1, 8), rng.normal(3, 1, 7)]

    def qhat(tau, kappa):
        a, b = x[:tau], x[tau:kappa]
        between = np.abs(a[:, None] - b[None, :]).mean()
        within = [np.abs(s[:, None] - s[None, :]).sum() / (len(s) * (len(s) - 1))
                  for s in (a, b)]
        return len(a) * len(b) / (len(a) + len(b)) * (2 * between - within[0] - within[1])

    best = max(((t, k) for t in range(3, 13) for k in range(t + 3, 16)),
               key=lambda tk: qhat(*tk))
    tau, q = changes.candidate(changes._prefix(x), 0, 15, 3)
    assert tau == best[0] and q == pytest.approx(qhat(*best))


# --- a synthetic history -------------------------------------------------------------------

def _record(root: Path, seed: int, at: float, **kwargs) -> store.Entry:
    t = table(seed, **kwargs).assign(
        commit="abc123", dirty=False, image_digest="", measured_at=at,
        versions='{"torch": "2.13.0"}', hosts="node1,node2", site_sha256="s1",
        site_config='{"name": "local"}')
    return store.add(root, t, Path(f"/sweeps/s{seed}"))


def _history(root: Path, slow_from: int = 4, count: int = 8) -> list[store.Entry]:
    """``count`` sweeps, the communication of those from ``slow_from`` on 3 times slower
    (mode option comm_delay_ms=30 where it is)."""
    return [_record(root, seed, 1_000_000.0 + 3600 * seed,
                    **({"scale": {"t_comm": 3.0}, "options": '{"backend": "gloo", '
                        '"comm_delay_ms": 30}'} if seed >= slow_from else {}))
            for seed in range(1, count + 1)]


def test_changes_names_the_entry_the_phase_and_what_changed(tmp_path):
    made = _history(tmp_path)
    result = CliRunner().invoke(app, ["history", "changes", "--history", str(tmp_path),
                                      "--ignore-option", "comm_delay_ms", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    (cp,) = data["change_points"]
    assert cp["entry"] == made[3].id and cp["sweep"] == "/sweeps/s4"
    assert cp["previous_entry"] == made[2].id
    assert cp["verdict"] == "slower" and cp["hint"] == "look at the fabric"
    assert any(a.startswith("exposed communication +") for a in cp["attribution"])
    assert cp["changed"] == ["option comm_delay_ms (unset) → 30"]
    s = cp["shifts"]["samples_per_s"]
    assert s["moved"] == "worse" and s["interval"][0] < s["ratio"] < s["interval"][1] < 1
    assert cp["shifts"]["t_comm"]["ratio"] == pytest.approx(3.0, rel=0.1)
    assert "compute" not in cp["shifts"]  # compute did not move


def test_changes_text_junit_and_exit_status(tmp_path):
    _history(tmp_path)
    report = tmp_path / "changes.xml"
    args = ["history", "changes", "--history", str(tmp_path), "--ignore-option",
            "comm_delay_ms", "--junit", str(report)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert re.search(r"8 entries, 1 change point\(s\)\n  \S+ \(.*sweep /sweeps/s4\): slower "
                     r"\d+ % \[\d+–\d+ %\]: .*exposed communication \+\d+ %.*→ look at the "
                     r"fabric\n    changed since \S+: option comm_delay_ms \(unset\) → 30\n",
                     result.output), result.output
    cases = _cases(report)
    failed = {name for (_, name), failure in cases.items() if failure is not None}
    assert failed == {"samples_per_s", "t_iter", "t_comm", "t_comm_total"}
    assert "outside the band" in cases[next(k for k in cases if k[1] == "t_comm")]
    assert CliRunner().invoke(app, [*args, "--fail-if-slower"]).exit_code == 1
    # Without --ignore-option the delayed runs are a configuration of their own: no change
    quiet = CliRunner().invoke(app, ["history", "changes", "--history", str(tmp_path)])
    assert "0 change point(s) in 2 configuration(s)" in quiet.output, quiet.output


def test_nothing_recorded_changed_says_so_and_filters_apply(tmp_path):
    for seed in range(1, 9):  # the same configuration, slower compute from the 5th sweep
        _record(tmp_path, seed, 1_000_000.0 + seed,
                **({"scale": {"t_f": 2.0, "t_b": 2.0}} if seed >= 5 else {}))
    out = CliRunner().invoke(app, ["history", "changes", "--history", str(tmp_path)]).output
    assert "look at the nodes" in out and changes.NOTHING_CHANGED in out, out
    other = CliRunner().invoke(app, ["history", "changes", "--history", str(tmp_path),
                                     "--mode", "horovod"]).output
    assert other.startswith("no recorded sweep matches"), other


def test_what_changed_names_versions_commit_site_and_nodes():
    a = table(1).assign(commit="abc123", image_digest="sha256:aa", versions='{"torch": "2.13.0"}',
                        hosts="node1,node2", site_sha256="s1",
                        site_config='{"partitions": [{"sbatch": {"time": "00:10:00"}}]}')
    b = table(2).assign(commit="def456", image_digest="sha256:bb", versions='{"torch": "2.14.0"}',
                        hosts="node3,node4", site_sha256="s2",
                        site_config='{"partitions": [{"sbatch": {"time": "00:20:00"}}]}')
    from orchestrator.history.compare import what_differs

    assert what_differs(a, b) == [
        "orch commit abc123 → def456", "image digest sha256:aa → sha256:bb",
        "site config s1 → s2 (partitions[0].sbatch.time 00:10:00 → 00:20:00)",
        "nodes node1,node2 → node3,node4", "torch 2.13.0 → 2.14.0"]


def test_levels_are_cached_and_the_cache_is_not_needed(tmp_path):
    made = _history(tmp_path, count=6)
    levels, problems = changes.load_levels(tmp_path, made)
    cache = tmp_path / store.CACHE / changes.CACHE_FILE
    assert cache.is_file() and not problems
    again, _ = changes.load_levels(tmp_path, made)
    pd.testing.assert_frame_equal(levels, again)
    cache.write_bytes(b"damaged")  # a damaged cache is rebuilt, never trusted
    rebuilt, _ = changes.load_levels(tmp_path, made)
    pd.testing.assert_frame_equal(levels.sort_index(axis=1), rebuilt.sort_index(axis=1))
    assert set(levels["entry"]) == {e.id for e in made}


# --- JUnit ---------------------------------------------------------------------------------

def _cases(path: Path) -> dict[tuple[str, str], str | None]:
    """(classname, name) -> the failure message (None: passed), as a CI system reads the
    report: a testsuites root, its testsuite's counts agreeing with its test cases."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) > 0
    failures = {(c.get("classname"), c.get("name")): (c.find("failure").get("message")
                                                       if c.find("failure") is not None
                                                       else None) for c in cases}
    assert int(suite.get("failures")) == sum(f is not None for f in failures.values())
    assert int(root.get("failures")) == int(suite.get("failures"))
    return failures


def test_junit_is_read_by_a_junit_reader(tmp_path):
    import junitparser  # the reader of EnricoMi/publish-unit-test-result-action (GitHub)

    path = tmp_path / "r.xml"
    junit.write(path, "orch check s", [
        junit.Case("torch-ddp lenet5 local 2x1 b32", "samples_per_s", "samples_per_s 812 "
                   "samples/s, outside [950, 1300] samples/s", "detail & <more>"),
        junit.Case("torch-ddp lenet5 local 2x1 b32", "t_comm", detail="ok"),
        junit.Case("references", "partitions.gpu[0]", skipped="no run")])
    xml = junitparser.JUnitXml.fromfile(str(path))
    (suite,) = list(xml)
    assert (suite.tests, suite.failures, suite.skipped) == (3, 1, 1)
    first = next(iter(suite))
    assert first.classname == "torch-ddp lenet5 local 2x1 b32"
    assert first.result[0].message.startswith("samples_per_s 812")
    assert first.result[0].text == "detail & <more>"


def test_orch_check_writes_junit_and_exits_1_on_a_failing_reference(tmp_path):
    a = write_results(tmp_path / "a", *result_set(1))
    b = write_results(tmp_path / "b", *result_set(2, scale={"t_comm": 2.0}))
    refs = tmp_path / "references.yaml"
    refs.write_text(REFS)
    held = CliRunner().invoke(app, ["check", str(a), "--references", str(refs), "--junit",
                                    str(tmp_path / "a.xml")])
    assert held.exit_code == 0, held.output
    assert set(_cases(tmp_path / "a.xml").values()) == {None}
    failed = CliRunner().invoke(app, ["check", str(b), "--references", str(refs), "--junit",
                                      str(tmp_path / "b.xml")])
    assert failed.exit_code == 1
    cases = _cases(tmp_path / "b.xml")
    (message,) = [m for m in cases.values() if m is not None]
    assert re.match(r"t_comm [\d.]+ s, outside \[[\d.e-]+, [\d.e-]+\] s \(\+\d+\.\d % from "
                    r"the reference 0\.015\)", message), message


# --- the store shared by a team ------------------------------------------------------------

def _gather(args: tuple[str, int, str]) -> tuple[str, bool]:
    """One array task's gather recording its sweep (``sweep`` twice for the same sweep)."""
    root, seed, sweep = args
    t = table(seed).assign(measured_at=1_000_000.0 + seed)
    entry, added = store.record(Path(root), t, Path(sweep))
    return entry.id, added


def test_64_concurrent_gathers_lose_nothing_and_record_a_sweep_once(tmp_path):
    # 64 sweeps gathered at once (Slurm array tasks), 8 of them gathered twice at once
    tasks = [(str(tmp_path), seed, f"/sweeps/s{seed}") for seed in range(64)]
    tasks += [(str(tmp_path), seed, f"/sweeps/s{seed}") for seed in range(8)]
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["orchestrator.history.store", "tests.test_history"])
    with ctx.Pool(16) as pool:
        done = pool.map(_gather, tasks, chunksize=1)
    found, damaged = store.entries(tmp_path)
    assert damaged == 0 and len(found) == 64
    assert {e.sweep for e in found} == {f"/sweeps/s{seed}" for seed in range(64)}
    added = [entry for entry, new in done if new]
    assert sorted(added) == sorted(e.id for e in found)  # each told the truth
    assert {entry for entry, _ in done} == {e.id for e in found}
    assert len(list((tmp_path / "entries").iterdir())) == 64  # no orphan file, no tmp file
    assert not [p for p in (tmp_path / "records").iterdir() if p.name.startswith(".")]
    assert store.select(tmp_path)[0]["entry"].nunique() == 64


def test_a_reader_never_sees_a_half_written_entry(tmp_path):
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["orchestrator.history.store", "tests.test_history"])
    with ctx.Pool(2) as pool:
        pending = pool.map_async(_gather, [(str(tmp_path), s, f"/s{s}") for s in range(24)])
        seen = 0
        while not pending.ready() or seen < 24:
            found, damaged = store.entries(tmp_path)
            assert damaged == 0
            for e in found:  # every entry listed is whole
                assert store.load(tmp_path, e) is not None, e.id
            seen = len(found)
        pending.get()
    assert seen == 24


def test_a_groups_history_is_group_writable_whatever_the_umask(tmp_path):
    root = tmp_path / "team"
    root.mkdir()
    os.chmod(root, 0o2775)  # chgrp benchers; chmod 2775: a team's history
    old = os.umask(0o022)
    try:
        made = _history(root, count=6)
        changes.load_levels(root, made)
    finally:
        os.umask(old)
    for path in [root / "entries", root / "records", root / "cache", *root.rglob("*")]:
        mode = path.stat().st_mode
        assert mode & stat.S_IWGRP, path
        if path.is_dir():
            assert mode & stat.S_ISGID, path
    private = tmp_path / "mine"
    _record(private, 1, 1.0)
    assert not (private / "entries").stat().st_mode & stat.S_IWGRP  # the umask's, elsewhere


def test_a_history_written_before_records_is_read(tmp_path):
    e = _record(tmp_path, 1, 1.0)
    legacy = tmp_path / "old"
    (legacy / "entries").mkdir(parents=True)
    (tmp_path / e.file).rename(legacy / e.file)
    (legacy / "index.jsonl").write_text(e.model_dump_json() + "\n")  # one line per entry
    (found,), damaged = store.entries(legacy)
    assert found == e and damaged == 0
    e2 = _record(legacy, 2, 2.0)
    assert [x.id for x in store.entries(legacy)[0]] == [e.id, e2.id]


# --- end to end: six real sweeps ------------------------------------------------------------

@pytest.mark.ranks
def test_six_real_sweeps_the_last_three_with_a_slow_fabric(tmp_path):
    """Six local sweeps recorded into one history by orch gather (the site names it), the
    last three with every all-reduce 30 ms late: one change point, at the fourth entry,
    named as communication, with what changed there; none among the first three."""
    site = tmp_path / "local.yaml"
    site.write_text((Path(__file__).parent.parent / "site-configs" / "local.yaml").read_text()
                    + f"history: {tmp_path / 'history'}\n")
    sweeps = []
    for i in range(6):
        out = tmp_path / f"night-{i}"
        # 40 steps a window (half a second here): a run's trimmed mean then sees past the
        # bursts of a shared machine's load, which 10 steps did not
        run_orch("sweep", "--site", site, "--model", "lenet5", "--nodes", "2", "--iters",
                 "40", "--warmup", "3", "--out", out,
                 *(["--option", "comm_delay_ms=30"] if i >= 3 else []), check=True)
        run_orch("gather", out, check=True)  # records it in the history the site names
        sweeps.append(out)
    entries = store.entries(tmp_path / "history")[0]
    assert [e.sweep for e in entries] == [str(s.resolve()) for s in sweeps]
    proc = run_orch("history", "changes", "--history", tmp_path / "history",
                    "--ignore-option", "comm_delay_ms", "--format", "json", check=True)
    data = json.loads(proc.stdout)
    levels = {s["metric"]: [round(v, 5) for v in s["levels"]] for s in data["series"]}
    clean = levels["t_iter"][:3]
    if max(clean) > 2 * min(clean):
        # Identical sweeps a factor 2 apart (this 2-core machine's load has taken a LeNet-5
        # step from 8 to 100 ms between two sweeps): the 30 ms delay moves a step less than
        # the machine did, and no test on six points can tell it; said, not failed.
        pytest.skip(f"the machine's load moved the three identical sweeps' iteration time "
                    f"by ×{max(clean) / min(clean):.1f} (levels {levels['t_iter']} s)")
    assert len(data["change_points"]) == 1, levels
    (cp,) = data["change_points"]
    assert cp["entry"] == entries[3].id and cp["sweep"] == str(sweeps[3].resolve())
    assert "option comm_delay_ms (unset) → 30" in cp["changed"]
    assert cp["verdict"] == "slower" and "communication" in cp["headline"], cp["headline"]
    assert cp["hint"] == "look at the fabric"
    assert all(s["entries_before"] == 3 for s in cp["shifts"].values())
    text = run_orch("history", "changes", "--history", tmp_path / "history",
                    "--ignore-option", "comm_delay_ms", "--junit", tmp_path / "c.xml",
                    check=True).stdout
    assert f"  {entries[3].id} (" in text and "exposed communication" in text, text
    assert any(_cases(tmp_path / "c.xml").values())


# --- what a GPU run records of its driver and libraries -------------------------------------

def test_the_driver_and_cuda_libraries_are_in_a_ranks_versions(tmp_path, monkeypatch):
    # The driver file as an H200's kernel module writes it; torch's CUDA faked (no GPU here)
    import sys
    import types

    from orchestrator.rankside import harness

    proc = tmp_path / "version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct 16 "
                    "2025\nGCC version:  gcc version 13.3.0\n")
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(is_available=lambda: True,
                                   nccl=types.SimpleNamespace(version=lambda: (2, 28, 9))),
        version=types.SimpleNamespace(cuda="13.0"),
        backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91300)))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert harness.gpu_versions(str(proc)) == {"nvidia_driver": "580.159.04", "cuda": "13.0",
                                               "cudnn": "91300", "nccl": "2.28.9"}
    monkeypatch.delitem(sys.modules, "torch")
    assert harness.gpu_versions(str(tmp_path / "none")) == {}
