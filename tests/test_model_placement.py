"""Fair local nodes: on the local site each virtual node's ranks run on cores of their own
(templates/shared/local-placement.sh.j2, in the local launcher and in mpirun's local branch:
taskset, one block of the job's CPUs a node),
as a cluster node's cores are its own, and each rank's log header records the affinity it got;
a run whose ranks outnumber the cores is not pinned and says so (and its prediction is flagged:
test_model_validity). A real 2-node run of real ranks."""

from __future__ import annotations

import os

import pytest

from orchestrator import protocol

from .conftest import run_orch


def _cpus(cpulist: str) -> set[int]:
    out: set[int] = set()
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@pytest.mark.ranks
@pytest.mark.parametrize(("mode", "options"), [
    ("allreduce-bench", ("--option", "sizes=4:1K", "--option", "reps=1")),  # local launcher
    ("mpi-ssgd", ()),                                                      # mpirun
])
def test_local_nodes_get_disjoint_cores(tmp_path, mode, options):
    cores = sorted(os.sched_getaffinity(0))
    out = tmp_path / "sweep"
    proc = run_orch("sweep", "--site", "local", "--mode", mode, "--nodes", 2, "--iters", 2,
                    "--warmup", 1, *options, "--no-preflight", "--out", out, check=True)
    assert "COMPLETED" in proc.stdout
    (rdir,) = [d for d in out.iterdir() if (d / "ranks").is_dir()]
    got = {}
    for rank in (0, 1):
        log = protocol.read_rank_log(rdir / "ranks" / f"rank-{rank}.jsonl")
        got[rank] = _cpus(log.header["binding"]["cpu_affinity"])
    if len(cores) >= 2:
        half = len(cores) // 2
        assert got == {0: set(cores[:half]), 1: set(cores[half:2 * half])}
    else:  # one core: the two ranks take turns on it
        assert got[0] == got[1] == set(cores)
