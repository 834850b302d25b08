"""Study files: the model and its schema, zip groups, per-mode options, command-line overrides,
the shipped studies, ranks per node and server counts as dimensions, the 1-rank baseline, and
a fuzz of malformed study files through the real CLI (exit 2, one located line, nothing
submitted)."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest

from orchestrator import modes
from orchestrator.errors import UserError
from orchestrator.plan import study
from orchestrator.plan.sweep import plan_row
from orchestrator.results import analyze

from .conftest import ROOT, run_orch


def write(tmp_path, text: str, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


# --- the model, zip, per-mode options, overrides --------------------------------------------


@pytest.fixture
def labelled(tmp_path):
    """A data set directory for planning a study that names one (convergence: data/digits):
    the manifest of a labelled set in every format. Planning reads the manifest, never the
    images."""
    from orchestrator import data

    (tmp_path / data.MANIFEST).write_text(data.Manifest(
        dataset="cifar", samples=1438, seed=0, formats=list(data.FORMAT_ENV), source="digits",
        classes=10, test_samples=359).model_dump_json())
    return str(tmp_path)


def test_shipped_studies_validate_on_both_sites(local, cluster, labelled):
    names = set(study.available())
    assert names >= {"gpu-scaling", "cpu-cluster", "survey-batch", "overlap", "convergence"}
    for name in names:
        ls = study.load(name)
        assert ls.study.name == name and ls.study.description
        overrides = {"data": labelled} if ls.study.data else None
        for site in (local, cluster):
            assert study.expand(ls, site, overrides)


def test_convergence_study_pairs_each_2_rank_run_with_its_1_rank_reference(local, labelled):
    runs = study.expand(study.load("convergence"), local, {"data": labelled})
    assert {(r.ranks, r.batch_size) for r in runs} == {(1, 128), (2, 64)}  # one global batch
    assert all(r.epochs == 3 and r.classes == 10 for r in runs)
    two = [r for r in runs if r.ranks == 2]
    asynchronous = {(r.mode, r.options.get("kvstore")) for r in two
                    if not modes.get(r.mode).is_synchronous(r.options)}
    assert asynchronous == {("tf-ps", None), ("mxnet-kvstore", "dist_async")}
    synchronous = {modes.get(r.mode).framework for r in two
                   if modes.get(r.mode).is_synchronous(r.options)}
    assert len(synchronous) >= 4, synchronous  # four frameworks' synchronous modes at least


def test_gpu_scaling_zips_nodes_and_tasks_per_node(local):
    runs = study.expand(study.load("gpu-scaling"), local)
    assert [(r.nodes, r.tasks_per_node, r.ranks) for r in runs] == [
        (1, 1, 1), (1, 2, 2), (1, 4, 4), (2, 2, 4), (4, 2, 8)]


def test_dimensions_cross_by_default(tmp_path, cluster):
    path = write(tmp_path, """
        name: crossed
        nodes: [1, 2]
        tasks_per_node: [1, 2]
        batch_sizes: [16, 32]
        """)
    runs = study.expand(study.load(str(path)), cluster)
    assert len(runs) == 8
    assert {(r.nodes, r.tasks_per_node, r.batch_size) for r in runs} == {
        (n, t, b) for n in (1, 2) for t in (1, 2) for b in (16, 32)}


def test_cpu_cluster_servers_per_mode(cluster):
    runs = study.expand(study.load("cpu-cluster"), cluster)
    ps = [r for r in runs if r.mode == "tf-ps" and r.nodes == 3]
    assert sorted(r.options["servers"] for r in ps) == ["1", "2"]
    two = next(r for r in ps if r.options["servers"] == "2")
    assert [(t.role, t.node) for t in two.tasks() if t.role == "ps"] == [("ps", 0), ("ps", 1)]
    assert "ps_per_node" not in two.options
    mx = [r for r in runs if r.mode == "mxnet-kvstore"]
    assert {(r.options["kvstore"], r.options["servers"]) for r in mx} == {
        (k, s) for k in ("dist_sync", "dist_async") for s in ("1", "2")}
    # torch-ddp has no servers: the per-mode options do not leak into other modes
    assert all("servers" not in r.options for r in runs if r.mode in ("torch-ddp",
                                                                      "tf-allreduce"))


def test_command_line_overrides_the_file(local):
    ls = study.load("gpu-scaling")
    runs = study.expand(ls, local, {"nodes": (1, 2), "batch_sizes": (8,)})
    # nodes left the zip group: tasks_per_node (1, 2, 4, 2, 2) -> 1, 2, 4 crossed with 1, 2
    assert {(r.nodes, r.tasks_per_node) for r in runs} == {(n, t) for n in (1, 2)
                                                          for t in (1, 2, 4)}
    assert {r.batch_size for r in runs} == {8}


def test_schema_is_the_model():
    sch = study.schema()
    assert sch["title"] == "orch study"
    for field in ("nodes", "tasks_per_node", "modes", "models", "batch_sizes", "partitions",
                  "options", "per_mode", "zip", "repeats", "data", "prefetch", "name",
                  "description"):
        assert field in sch["properties"]
    assert sch["additionalProperties"] is False


def test_provenance_record_has_content_and_hash():
    ls = study.load("overlap")
    rec = ls.provenance()
    assert rec["name"] == "overlap" and rec["content"] == ls.path.read_text()
    import hashlib

    assert rec["sha256"] == hashlib.sha256(rec["content"].encode()).hexdigest()


def test_plan_row_names_roles(cluster):
    runs = study.expand(study.load("cpu-cluster"), cluster)
    row = plan_row(next(r for r in runs if r.mode == "mxnet-kvstore" and r.nodes == 3
                        and r.options["servers"] == "2"))
    assert row["roles"] == "1 scheduler, 2 server, 3 worker"
    assert (row["nodes"], row["tasks_per_node"], row["ranks"], row["tasks"]) == (3, 1, 3, 6)


# --- servers in all, as a mode option ------------------------------------------------------


@pytest.mark.parametrize("mode, role, per_node", [("tf-ps", "ps", "ps_per_node"),
                                                  ("mxnet-kvstore", "server",
                                                   "servers_per_node")])
def test_servers_in_all_round_robin(mode, role, per_node):
    m = modes.get(mode)
    tasks = m.tasks(3, 2, {"servers": "4"})
    assert [t.node for t in sorted((t for t in tasks if t.role == role), key=lambda t: t.index)
            ] == [0, 1, 2, 0]
    assert sum(t.role == "worker" for t in tasks) == 6
    # the per-node option keeps working, and its default without servers
    assert sum(t.role == role for t in m.tasks(3, 1, {per_node: "2"})) == 6
    assert sum(t.role == role for t in m.tasks(3, 1, m.resolve_options({}, 0))) == 3
    with pytest.raises(UserError, match="not both"):
        m.resolve_options({"servers": "2", per_node: "1"}, 0)
    with pytest.raises(UserError, match="servers=0"):
        m.resolve_options({"servers": "0"}, 0)


# --- speedup from the smallest run of a configuration --------------------------------------


def _runs(rows):
    base = {"site": "s", "partition": "p", "mode": "torch-ddp", "model": "lenet5",
            "dataset": "cifar", "batch_size": 32, "launcher": "local", "options": "{}",
            "data": None, "prefetch": True, "state": "COMPLETED"}
    return pd.DataFrame([{**base, "nodes": n, "tasks_per_node": t, "ranks": n * t,
                          "samples_per_s": rate} for n, t, rate in rows])


def test_speedup_is_relative_to_the_one_rank_run():
    out = analyze.add_scaling(_runs([(1, 1, 100.0), (1, 2, 180.0), (1, 4, 300.0),
                                     (2, 2, 320.0), (4, 2, 560.0)]))
    assert list(out["baseline_ranks"]) == [1] * 5
    assert list(out["speedup"]) == pytest.approx([1.0, 1.8, 3.0, 3.2, 5.6])
    assert list(out["efficiency"]) == pytest.approx([1.0, 0.9, 0.75, 0.8, 0.7])


def test_without_a_one_rank_run_the_smallest_is_the_baseline():
    out = analyze.add_scaling(_runs([(1, 2, 200.0), (2, 2, 360.0)]))
    assert list(out["baseline_ranks"]) == [2, 2]
    assert list(out["efficiency"]) == pytest.approx([1.0, 0.9])


def test_failed_smallest_run_leaves_no_speedup():
    runs = _runs([(1, 1, None), (2, 1, 180.0)])
    runs.loc[0, "state"] = "FAILED"
    out = analyze.add_scaling(runs)
    assert out["speedup"].isna().all() and out["baseline_ranks"].isna().all()


def test_server_counts_are_separate_configurations():
    runs = _runs([(1, 1, 100.0), (2, 1, 150.0), (1, 1, 80.0), (2, 1, 160.0)])
    runs["options"] = ['{"servers": "1"}'] * 2 + ['{"servers": "2"}'] * 2
    out = analyze.add_scaling(runs)
    assert list(out["speedup"]) == pytest.approx([1.0, 1.5, 1.0, 2.0])


def test_report_names_the_baseline_and_goes_by_ranks():
    from orchestrator.report.tables import speedup_table

    runs = analyze.add_scaling(_runs([(1, 1, 100.0), (1, 2, 180.0), (2, 2, 320.0)]))
    runs["_label"] = "torch-ddp lenet5"
    runs["efficiency"] = runs["efficiency"].astype(float)
    t = speedup_table(runs)
    assert t.title == "Speedup vs the 1-rank baseline (efficiency)"
    assert t.columns == ["configuration", "1 rank", "2 ranks", "4 ranks", "baseline"]
    assert t.rows[0][3] == "2x2: 3.20 (80%)"
    assert t.rows[0][-1] == "1 rank (1 node x 1)"


# --- malformed study files through the real CLI --------------------------------------------

GOOD = """\
name: fuzz
nodes: [1, 2]
modes: [torch-ddp]
iters: 3
warmup: 1
"""

# (file text, expected 'file:line' line number or None, a phrase the message must hold)
BAD = [
    ("name: fuzz\nnode: [1, 2]\n", 2, "node: unknown field"),
    ("name: fuzz\nnodes: [1, 2]\nmodel: [lenet5]\n", 3, "model: unknown field"),
    ("name: fuzz\nbatch_size: [32]\n", 2, "batch_size: unknown field"),
    ("name: fuzz\ntask_per_node: [1]\n", 2, "task_per_node: unknown field"),
    ("name: fuzz\nnodes: []\n", 2, "nodes: List should have at least 1 item"),
    ("name: fuzz\nmodes: []\n", 2, "modes: List should have at least 1 item"),
    ("name: fuzz\nmodels: []\n", 2, "models: List should have at least 1 item"),
    ("name: fuzz\nbatch_sizes: []\n", 2, "batch_sizes: List should have at least 1 item"),
    ("name: fuzz\ntasks_per_node: []\n", 2, "tasks_per_node: List should have at least"),
    ("name: fuzz\noptions:\n  backend: []\n", 3, "options.backend: List should have"),
    ("name: fuzz\nnodes: [1, 0]\n", 2, "nodes[1]: Input should be greater than or equal to 1"),
    ("name: fuzz\nnodes: [1, -2]\n", 2, "nodes[1]: Input should be greater than or equal"),
    ("name: fuzz\nnodes: [1, two]\n", 2, "nodes[1]: Input should be a valid integer"),
    ("name: fuzz\nnodes: [1, 2.5]\n", 2, "nodes[1]: Input should be a valid integer"),
    ("name: fuzz\nnodes: 2\n", 2, "nodes: Input should be a valid list"),
    ("name: fuzz\nnodes: [true]\n", 2, "nodes[0]: Input should be a valid integer"),
    ("name: fuzz\ntasks_per_node: [1, 0]\n", 2, "tasks_per_node[1]: Input should be greater"),
    ("name: fuzz\nbatch_sizes: [32, big]\n", 2, "batch_sizes[1]: Input should be a valid int"),
    ("name: fuzz\nmodes: torch-ddp\n", 2, "modes: Input should be a valid list"),
    ("name: fuzz\nmodes: [torch_ddp]\n", 2, "modes[0]: unknown mode 'torch_ddp'; valid:"),
    ("name: fuzz\nmodes: [torch-ddp, tf-pss]\n", 2, "modes[1]: unknown mode 'tf-pss'"),
    ("name: fuzz\nmodels: [resnet]\n", 2, "models[0]: unknown model 'resnet'"),
    ("name: fuzz\nmodels: [lenet5, 7]\n", 2, "models[1]: Input should be a valid string"),
    ("name: fuzz\noptions:\n  bakend: [gloo]\n", 3, "options.bakend: none of the modes"),
    ("name: fuzz\noptions:\n  backend: [mpi]\n", 3, "options.backend[0]: mode 'torch-ddp': "
     "backend=mpi is not valid; choices"),
    ("name: fuzz\noptions:\n  backend: gloo\n", 3, "options.backend: Input should be a valid "
     "list"),
    ("name: fuzz\noptions: [backend]\n", 2, "options: Input should be a valid dictionary"),
    ("name: fuzz\nmodes: [tf-ps]\noptions:\n  servers: [0]\n", 4, "options.servers[0]: mode "
     "'tf-ps': servers=0 must be a whole number >= 1"),
    ("name: fuzz\nmodes: [tf-ps]\nper_mode:\n  tf-ps:\n    options:\n      ps: [1]\n", 6,
     "per_mode.tf-ps.options.ps: mode 'tf-ps' has no option 'ps'; valid:"),
    ("name: fuzz\nmodes: [tf-ps]\nper_mode:\n  mxnet-kvstore:\n    options:\n"
     "      servers: [1]\n", 4, "per_mode.mxnet-kvstore: not one of the study's modes"),
    ("name: fuzz\nmodes: [mxnet-kvstore]\nper_mode:\n  mxnet-kvstore:\n    options:\n"
     "      kvstore: [dist_syn]\n", 6, "kvstore=dist_syn is not valid"),
    ("name: fuzz\nper_mode:\n  torch-ddp:\n    option: {}\n", 4,
     "per_mode.torch-ddp.option: unknown field; valid fields here: batch_sizes, models, "
     "options"),
    ("name: fuzz\nnodes: [1, 2]\ntasks_per_node: [1, 2, 4]\nzip:\n  - [nodes, tasks_per_node]\n",
     5, "zip[0]: zipped lists must have one length (nodes has 2, tasks_per_node has 3)"),
    ("name: fuzz\nzip:\n  - [nodes, nodez]\n", 3, "zip[0][1]: 'nodez' is not a dimension"),
    ("name: fuzz\nzip:\n  - [nodes]\n", 3, "zip[0]: List should have at least 2 items"),
    ("name: fuzz\nzip:\n  - [nodes, tasks_per_node]\n", 3, "zip[0][1]: 'tasks_per_node' is "
     "not given in the study"),
    ("name: fuzz\nmodels: [lenet5]\nzip:\n  - [nodes, models]\n  - [models, batch_sizes]\n", 5,
     "'models' is already in zip group 0"),
    ("name: fuzz\nnodes: [1, 8]\n", 2, "nodes[1]: 8 nodes; partition 'ib' of site "
     "'testcluster' has only 4"),
    ("name: fuzz\npartitions: [gpu]\n", 2, "partitions[0]: site 'testcluster' has no "
     "partition 'gpu'; valid: ib, eth"),
    ("name: fuzz\nnodes: [1]\niters: 0\n", 3, "iters: Input should be greater than or equal"),
    ("name: fuzz\nwarmup: -1\n", 2, "warmup: Input should be greater than or equal to 0"),
    ("name: fuzz\nrepeats: many\n", 2, "repeats: Input should be a valid integer"),
    ("name: fuzz\nprefetch: [maybe]\n", 2, "prefetch[0]: Input should be a valid boolean"),
    ("name: fuzz\nlauncher: slurm\n", 2, "launcher: 'slurm' is not a launcher; valid:"),
    ("name: fuzz\ndataset: mnist\n", 2, "dataset: unknown dataset 'mnist'; valid:"),
    ("nodes: [1, 2]\n", 1, "name: required field is missing"),
    ("name: bad name!\n", 1, "name: String should match pattern"),
    ("name: fuzz\ndescription: [a, b]\n", 2, "description: Input should be a valid string"),
    ("- name: fuzz\n- nodes: [1]\n", None, "a study is a YAML mapping"),
    ("just a string\n", None, "a study is a YAML mapping"),
    ("", None, "a study is a YAML mapping"),
    ("name: fuzz\nnodes: [1, 2\nmodes: [torch-ddp]\n", 3, "not valid YAML"),
    ("name: fuzz\n  nodes: [1]\n", 2, "not valid YAML"),
    ("name: fuzz\nnodes: [1]\nnodes: [2]\n", 3, "duplicate key 'nodes' (first given on line 2)"),
    ("name: fuzz\noptions:\n  backend: [gloo]\n  backend: [nccl]\n", 4,
     "duplicate key 'backend' (first given on line 3)"),
    ("name: fuzz\nmodels: [alexnet]\ndataset: imagenet\nmodes: [torch-ddp]\ndata: /\n",
     5, "data: no manifest.json there; make the data set with 'orch data make --out / "),
]


def _study_file(tmp_path, i, text):
    path = tmp_path / f"bad-{i:02d}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("i", range(len(BAD)))
def test_malformed_study_gets_one_located_line(tmp_path, i):
    text, line, phrase = BAD[i]
    path = _study_file(tmp_path, i, text)
    proc = run_orch("sweep", "--study", path, "--site", "testcluster", "--dry-run",
                    "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    where = f"{path}:{line}: " if line else f"{path}"
    assert lines[0].startswith(f"orch: error: {where}"), lines[0]
    assert phrase in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


def test_fuzz_has_at_least_40_cases():
    assert len(BAD) >= 40


@pytest.mark.parametrize("i", [0, 20, 24, 32, 37])
def test_malformed_study_submits_nothing_without_dry_run(tmp_path, i):
    text = BAD[i][0]
    path = _study_file(tmp_path, i, text)
    out = tmp_path / "out"
    proc = run_orch("sweep", "--study", path, "--site", "local", "--out", out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_unknown_study_name_and_missing_file(tmp_path):
    proc = run_orch("sweep", "--study", "gpu-scalin", "--dry-run")
    assert proc.returncode == 2 and "unknown study 'gpu-scalin'; valid:" in proc.stderr
    proc = run_orch("sweep", "--study", tmp_path / "none.yaml", "--dry-run")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


# --- the CLI: schema, validate, dry-run plan ------------------------------------------------


def test_study_schema_command_prints_the_model_schema():
    proc = run_orch("study", "schema", check=True)
    assert json.loads(proc.stdout) == study.schema()


def test_study_validate_command():
    proc = run_orch("study", "validate", ROOT / "studies" / "cpu-cluster.yaml", "--site",
                    "testcluster", check=True)
    assert "valid study 'cpu-cluster'" in proc.stdout and "16 run(s)" in proc.stdout


def test_dry_run_prints_the_plan_first(tmp_path):
    out = tmp_path / "out"
    proc = run_orch("sweep", "--study", "cpu-cluster", "--site", "testcluster", "--dry-run",
                    "--out", out, check=True)
    head = proc.stdout.split("# =====", 1)[0]
    assert "plan: study cpu-cluster" in head
    for word in ("mode", "nodes", "tasks/node", "ranks", "roles", "1 chief, 3 worker, 2 ps",
                 "1 scheduler, 2 server, 3 worker", "servers=2"):
        assert word in head, word
    assert len([ln for ln in head.splitlines() if "-lenet5-" in ln]) == 16
    assert proc.stdout.count("# ===== ") >= 32
    assert not out.exists()


def test_command_line_flags_override_the_study(tmp_path):
    proc = run_orch("sweep", "--study", "gpu-scaling", "--site", "testcluster", "--dry-run",
                    "--nodes", "1", "--tasks-per-node", "1,2", "--out", tmp_path / "o",
                    check=True)
    head = proc.stdout.split("# =====", 1)[0]
    assert len([ln for ln in head.splitlines() if "-lenet5-" in ln]) == 2


def test_prepared_runs_record_the_study_and_the_result_set_names_it(tmp_path, local):
    from orchestrator import execute, results

    ls = study.load("gpu-scaling")
    runs = study.expand(ls, local)[:2]
    prepared = execute.prepare(runs, local, tmp_path, study=ls.provenance())
    for p in prepared:
        prov = json.loads((p.rdir / "provenance.json").read_text())
        assert prov["study"] == ls.provenance()
    merged = results.merge(tmp_path)
    assert list(merged["study"]) == ["gpu-scaling", "gpu-scaling"]
    assert set(merged["state"]) == {"NEW"}


def test_mode_flag_keeps_that_modes_own_options(cluster):
    runs = study.expand(study.load("cpu-cluster"), cluster, {"modes": ("tf-ps",)})
    assert {r.mode for r in runs} == {"tf-ps"}
    assert sorted({r.options["servers"] for r in runs}) == ["1", "2"]


def test_complex_yaml_key_is_an_error_not_a_crash(tmp_path):
    path = write(tmp_path, """
        name: fuzz
        ? [a, b]
        : 1
        """)
    with pytest.raises(UserError, match=r"s\.yaml:2: not valid YAML"):
        study.load(str(path))
