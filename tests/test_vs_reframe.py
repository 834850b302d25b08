"""benchmarks/vs_reframe.py's claim that ReFrame runs orch's job script: the ReFrame test it
generates from a rendered job.sbatch writes the same commands, the same srun step and the same
resources, and its ReFrame configuration has the site's partitions. ReFrame itself is not
needed (the benchmark installs it outside the repository); nothing here is timed."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from benchmarks import vs_reframe as vs
from orchestrator import execute
from orchestrator.plan.sweep import expand
from orchestrator.spec.schema import SweepSpec


def _rendered(site, **spec) -> list:
    runs = expand(SweepSpec(iters=2, warmup=0, **spec), site)
    return [(run, r.job_script) for run, r in execute.dry_run(runs, site, Path("/scratch/x"))]


@pytest.mark.parametrize("spec", [{"nodes": (1,)}, {"nodes": (2,), "tasks_per_node": (2,)},
                                  {"nodes": (4,), "partitions": ("eth",)}])
def test_the_reframe_job_runs_job_sbatch_body_and_srun_step(cluster, spec):
    (run, script), = _rendered(cluster, **spec)
    t = vs.twin(script)
    commands = vs.logical_lines(script)
    # Every command of job.sbatch before its launch, verbatim and in order...
    assert t.prerun == commands[:-1] and "set -euo pipefail" in t.prerun
    assert any("MASTER_ADDR=" in c for c in t.prerun)
    # ...then the same srun step: ReFrame's launcher puts --cpus-per-task first, the rest as is.
    ours, theirs = (shlex.split(line, posix=False) for line in (commands[-1], vs.srun_line(t)))
    assert sorted(ours) == sorted(theirs) and ours[-2:] == theirs[-2:]
    assert theirs[-2:] == ["bash", '"$RUN_DIR/launch.sh"']
    # The same resources as the #SBATCH lines ask for.
    ranks = run.nodes * run.tasks_per_node
    assert (t.num_tasks, t.num_tasks_per_node) == (ranks, run.tasks_per_node)
    assert t.num_cpus_per_task == cluster.partition(run.partition).cpus_per_node \
        // run.tasks_per_node
    assert t.time_limit_s == run.time_limit_min * 60


def test_a_script_not_ending_in_an_srun_launch_is_refused():
    with pytest.raises(ValueError, match="does not end in an srun launch"):
        vs.twin("#!/bin/bash\n#SBATCH --nodes=1\nmpirun -np 2 python x.py\n")


def test_logical_lines_join_continuations_and_drop_comments():
    script = "#!/bin/bash\n# a comment\n\nA=1\nsrun --x=1 \\\n  --y=2 \\\n  bash b.sh\n"
    assert vs.logical_lines(script) == ["A=1", "srun --x=1 --y=2 bash b.sh"]


def test_reframe_config_is_the_sites_partitions_on_slurm_and_srun(cluster, tmp_path):
    config, test = vs.write_reframe_files(tmp_path, cluster, max_jobs=64)
    namespace: dict = {}
    exec(config.read_text(), namespace)  # the file ReFrame reads is this dict, as Python
    conf = namespace["site_configuration"]
    assert conf == vs.reframe_config(cluster, 64)
    (system,) = conf["systems"]
    assert system["name"] == cluster.name
    assert [p["name"] for p in system["partitions"]] == [p.name for p in cluster.partitions]
    for part in system["partitions"]:
        assert (part["scheduler"], part["launcher"], part["max_jobs"]) == ("slurm", "srun", 64)
        assert part["access"] == [f"--partition={part['name']}"]
    tree = ast.parse(test.read_text())  # the generated test is Python, with its one test
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["OrchRun"]


def test_the_manifest_points_the_test_at_each_runs_rank_logs(cluster, tmp_path):
    runs = expand(SweepSpec(nodes=(2,), iters=2, warmup=0, repeats=2), cluster)
    prepared = execute.prepare(runs, cluster, tmp_path / "runs")
    m = vs.manifest(prepared, cluster.name)
    assert sorted(m) == sorted(r.run_id for r in runs)
    for p in prepared:
        entry = m[p.run.run_id]
        assert entry["system"] == f"{cluster.name}:{p.run.partition}"
        assert entry["rank_logs"] == [str(p.rdir / "ranks" / f"rank-{k}.jsonl")
                                      for k in range(2)]
        assert entry["prerun"][1] == f"RUN_DIR={p.rdir}"
