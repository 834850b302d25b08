"""``bucket_cap_mb``, a run dimension declared by its rank argument alone (protocol.RANK_ARGS):
the option and study key, the run's field and id, its column, the rank's argument, and its
refusal for the modes that do not apply it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from orchestrator.errors import UserError
from orchestrator.modes.torch_ddp.mode import MODE as DDP
from orchestrator.plan import study
from orchestrator.plan.resolved import ResolvedRun
from orchestrator.plan.sweep import expand
from orchestrator.rankside import harness
from orchestrator.render import workload_args
from orchestrator.results import analyze, columns
from orchestrator.spec import api, settings
from orchestrator.spec.schema import SweepSpec

from .conftest import run_orch


def test_a_dimension_of_the_matrix_and_a_part_of_the_id(local):
    runs = expand(SweepSpec(nodes=(2,), bucket_cap_mb=(25, 100)), local)
    assert [r.bucket_cap_mb for r in runs] == [25, 100]
    default = expand(SweepSpec(nodes=(2,)), local)[0]
    assert default.bucket_cap_mb == 25
    assert runs[0].run_id == default.run_id  # at its default: the id runs had before it
    assert runs[1].run_id != default.run_id


def test_a_run_column_and_a_configuration_key():
    assert "bucket_cap_mb" in api.column_names()
    assert "bucket_cap_mb" in {c.name for c in columns.RUNS}
    assert "bucket_cap_mb" in analyze.GROUP_KEYS


def test_reaches_the_rank_only_off_its_default(local, tmp_path):
    run_25, run_100 = expand(SweepSpec(nodes=(1,), bucket_cap_mb=(25, 100)), local)
    args = workload_args(ResolvedRun.of(run_100, local), tmp_path)
    assert args[args.index("--bucket-cap-mb") + 1] == "100"
    assert "--bucket-cap-mb" not in workload_args(ResolvedRun.of(run_25, local), tmp_path)
    parser = harness.mode_parser(DDP)
    assert parser.parse_args(args).bucket_cap_mb == 100
    plain = workload_args(ResolvedRun.of(run_25, local), tmp_path)
    assert parser.parse_args(plain).bucket_cap_mb == 25  # the one default, both sides


def test_the_option_parses_a_list():
    s = settings.BY_NAME["bucket_cap_mb"]
    assert s.option == "--bucket-cap-mb"
    assert s.from_cli("1,25,100") == (1, 25, 100)
    assert s.from_cli(None) == (25,)
    with pytest.raises(UserError, match="--bucket-cap-mb: 0 is below the minimum of 1"):
        s.from_cli("0")


def test_refused_for_a_mode_that_does_not_apply_it(local):
    with pytest.raises(UserError, match="--bucket-cap-mb: mode 'torch-fsdp' does not apply "
                                        "it; modes that do: torch-ddp"):
        expand(SweepSpec(modes=("torch-fsdp",), nodes=(1,), bucket_cap_mb=(50,)), local)
    assert expand(SweepSpec(modes=("torch-fsdp",), nodes=(1,)), local)  # at its default: fine


def test_a_study_sets_it(tmp_path: Path, local):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent("""
        name: buckets
        nodes: [2]
        bucket_cap_mb: [10, 50]
        """).lstrip())
    runs = study.expand(study.load(str(path)), local)
    assert [r.bucket_cap_mb for r in runs] == [10, 50]


def test_the_command_line_takes_it():
    out = run_orch("sweep", "--site", "local", "--nodes", "1", "--bucket-cap-mb", "25,50",
                   "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "2 run(s) rendered" in out.stderr
    assert out.stdout.count("--bucket-cap-mb 50") == 1  # the run at 25 passes none
    bad = run_orch("sweep", "--site", "local", "--nodes", "1", "--mode", "horovod",
                   "--bucket-cap-mb", "5", "--dry-run")
    assert bad.returncode != 0
    assert "--bucket-cap-mb: mode 'horovod' does not apply it" in bad.stderr
