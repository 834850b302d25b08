"""What the per-run wrapper (``templates/containers/<runtime>.sh.j2``) and job.sbatch's
container block need: the runtime's command, the binds, the variables let in."""

from __future__ import annotations

from pathlib import Path

from ..containers.base import runtime
from ..site import Environment, Partition
from .image import ImageTree, expand_image

# Variables a rank needs from the launcher and the job script; everything else stays outside
# (the container starts from a clean environment). Exact names, then name prefixes. The site
# environment's own variables (e.g. MXNET_CPU_WORKER_NTHREADS) are added per run.
PASS_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "CUDA_VISIBLE_DEVICES",
              "PYTHONPATH", "USER", "HOME", "TMPDIR", "SLURMD_NODENAME")
PASS_PREFIXES = ("MASTER_", "SLURM_", "OMPI_", "PMIX_", "GLOO_", "NCCL_", "UCX_", "TF_", "DMLC_",
                 "ORCH_", "OMP_", "MKL_", "HOROVOD_")


def pass_pattern(env: Environment, transport: list[tuple[str, str]]) -> str:
    """Bash regex of the variable names the wrapper lets into the container."""
    names = sorted({*PASS_NAMES, *env.env, *(k for k, _ in transport)}
                   - {n for n in env.env if n.startswith(PASS_PREFIXES)}
                   - {k for k, _ in transport if k.startswith(PASS_PREFIXES)})
    prefixes = "|".join(PASS_PREFIXES)
    return f"^({'|'.join(names)}|({prefixes})[A-Za-z0-9_]*)$"


def wrapper_context(env: Environment, partition: Partition, run_dir: Path, lib_dir: Path,
                    data: list[str], transport: list[tuple[str, str]],
                    digest: str | None) -> dict:
    """What templates/containers/<runtime>.sh.j2 and job.sbatch's container block need:
    ranks see the run directory, the staged rank-side code and data directories."""
    c = env.container
    assert c is not None
    rt = runtime(c.runtime)
    image = expand_image(c)
    tree = ImageTree(image) if rt.binds_need_targets and image.exists() else None
    return {
        "runtime": c.runtime,
        "command": rt.command,
        "env_prefix": rt.env_prefix,
        "image": str(image),
        "python": c.python,
        "digest": digest or "unknown",
        "binds": rt.binds([str(run_dir), str(lib_dir), *data], list(c.binds), tree),
        "gpu": partition.gpus_per_node > 0,
        "pass": pass_pattern(env, transport),
    }
