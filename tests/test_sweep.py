"""Sweep expansion: the matrix, stable ids, and every bad input rejected before anything runs."""

from __future__ import annotations

import pytest

from orchestrator.errors import UserError
from orchestrator.plan.sweep import expand
from orchestrator.spec.schema import SweepSpec
from orchestrator.spec.settings import parse_int_list, parse_options

from .conftest import orch


def test_default_sweep_is_one_run_per_node_count(local):
    runs = expand(SweepSpec(), local)
    assert [(r.nodes, r.ranks, r.launcher) for r in runs] == [(1, 1, "local"), (2, 2, "local"),
                                                              (4, 4, "local")]
    assert {r.options["backend"] for r in runs} == {"gloo"}  # CPU partition


def test_ids_are_stable_and_change_with_any_parameter(local):
    a = expand(SweepSpec(nodes=(2,)), local)[0]
    again = expand(SweepSpec(nodes=(2,)), local)[0]
    other = expand(SweepSpec(nodes=(2,), batch_sizes=(64,)), local)[0]
    assert a.run_id == again.run_id
    assert a.run_id != other.run_id
    assert a.run_id.startswith("torch-ddp-lenet5-local-n2-r0-")


def test_matrix_over_partitions_models_repeats_and_options(cluster):
    spec = SweepSpec(nodes=(1, 4), partitions=("ib", "eth"), models=("lenet5", "resnet18"),
                     repeats=2, options={"backend": ("gloo",)})
    runs = expand(spec, cluster)
    assert len(runs) == 2 * 2 * 2 * 2
    assert len({r.run_id for r in runs}) == len(runs)
    assert {(r.partition, r.interconnect) for r in runs} == {("ib", "infiniband"),
                                                             ("eth", "ethernet")}
    assert {r.launcher for r in runs} == {"srun"}
    assert {r.time_limit_min for r in runs} == {10}


@pytest.mark.parametrize(
    ("text", "message"),
    [("1,x", "'x' is not a whole number"), ("0", "0 is below the minimum of 1"),
     ("", "expected a comma-separated list"), ("1,-2", "'-2' is not a whole number")],
)
def test_bad_node_lists(text, message):
    with pytest.raises(UserError, match=message):
        parse_int_list(text, "--nodes")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (SweepSpec(nodes=(8,)), "partition 'local' of site 'local' has only 4 node"),
        (SweepSpec(modes=("caffe",)), "unknown mode 'caffe'; valid: .*torch-ddp"),
        (SweepSpec(models=("vgg16",)),
         "unknown model 'vgg16'; valid: alexnet, bert-base, googlenet"),
        (SweepSpec(models=("lenet5",), dataset="imagenet"), "no 'imagenet' variant"),
        (SweepSpec(partitions=("gpu",)), "no partition 'gpu'; valid: local"),
        (SweepSpec(launcher="srun"), "not available on a local site"),
        (SweepSpec(options={"backend": ("mpi",)}), "backend=mpi is not valid; choices: nccl"),
        (SweepSpec(options={"bucket_size": ("0",)}), "--option bucket_size: none of the modes"),
        (SweepSpec(options={"overlap": ("wfbp",)}), "--option overlap: none of the modes"),
        (SweepSpec(iters=0), "--iters: must be at least 1"),
        (SweepSpec(inject_failure="one"), "expected RANK@ITER"),
        (SweepSpec(time_limit_min=0), "--time-limit: at least 1 minute"),
    ],
)
def test_bad_sweeps_are_rejected(local, spec, message):
    with pytest.raises(UserError, match=message):
        expand(spec, local)


def test_option_parsing():
    assert parse_options(["backend=gloo,nccl"]) == {"backend": ("gloo", "nccl")}
    with pytest.raises(UserError, match="expected NAME=VALUE"):
        parse_options(["backend"])


# Bad orch sweep arguments of every kind: exit 2, a short message, no traceback.

SWEEP_CASES: list[tuple[str, ...]] = [
    ("--nodes", ""), ("--nodes", "0"), ("--nodes", "-1"), ("--nodes", "a"), ("--nodes", ","),
    ("--nodes", "99999"), ("--nodes", "1.5"), ("--nodes", "²"),
    ("--tasks-per-node", "0"), ("--tasks-per-node", "-1"), ("--tasks-per-node", "1000000"),
    ("--tasks-per-node", "x"),
    ("--mode", ""), ("--mode", ","), ("--mode", "nope"), ("--model", ""), ("--model", "nope"),
    ("--batch-size", "0"), ("--batch-size", "x"), ("--batch-size", ""),
    ("--batch-size", "99999999"),
    ("--iters", "0"), ("--iters", "-1"), ("--iters", "10000000000"), ("--warmup", "-1"),
    ("--repeats", "0"), ("--dataset", "nope"), ("--dataset", ""),
    ("--time-limit", "0"), ("--time-limit", "-3"),
    ("--inject-failure", "x"), ("--inject-failure", "1@"), ("--launcher", "nope"),
    ("--launcher", "srun"), ("--partition", "nope"), ("--partition", "p" * 300),
    ("--partition", ","), ("--prefetch", "maybe"),
    ("--option", "x"), ("--option", "="), ("--option", "backend="), ("--option", "=gloo"),
    ("--option", "backend=nccl"), ("--option", "backend=mpi2"), ("--option", "nope=1"),
    ("--overlap", "sideways"), ("--bucket-size", "²"), ("--kvstore", "x"),
    ("--site", "nope"), ("--site", "/nonexistent.yaml"), ("--site", ""),
    ("-o", "somedir"),
]
MODE_OPTION_CASES: list[tuple[str, ...]] = [
    ("--mode", "mpi-ssgd", "--option", "bucket_size=²"),
    ("--mode", "mpi-ssgd", "--option", "bucket_size=-1"),
    ("--mode", "mpi-ssgd", "--option", "bucket_size=abc"),
    ("--mode", "mpi-ssgd", "--option", "overlap=bogus"),
    ("--mode", "mxnet-kvstore", "--option", "kvstore=bogus"),
    ("--mode", "mxnet-kvstore", "--option", "servers_per_node=0"),
    ("--mode", "mxnet-kvstore", "--option", "servers_per_node=x"),
    ("--mode", "torch-fsdp", "--option", "reshard_after_forward=maybe"),
    ("--mode", "allreduce-bench", "--option", "sizes=a:b"),
    ("--mode", "allreduce-bench", "--option", "reps=0"),
    ("--mode", "torch-ddp", "--option", "backend=nccl"),
    ("--mode", "torch-ddp,mpi-ssgd", "--option", "backend=bogus"),
    ("--mode", "tf-allreduce", "--option", "implementation=bogus"),
    ("--mode", "chainermn", "--option", "communicator=bogus"),
    ("--mode", "cntk", "--option", "learner=bogus"),
]


@pytest.mark.parametrize("args", SWEEP_CASES + MODE_OPTION_CASES,
                         ids=[" ".join(a)[:60] for a in SWEEP_CASES + MODE_OPTION_CASES])
def test_fuzz_sweep_arguments(tmp_path, args):
    code, _, err = orch("sweep", "--nodes", "1", "--dry-run", "--out", tmp_path / "o", *args)
    assert code == 2, (args, err)
    assert err.startswith("orch: error:") or "Error" in err, err  # click usage errors: exit 2
    assert len(err.strip().splitlines()) <= 8, err
