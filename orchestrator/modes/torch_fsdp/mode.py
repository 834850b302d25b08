"""PyTorch FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer
state sharded over the ranks; each unit's parameters all-gathered for its forward (and again
for its backward), its gradients reduce-scattered after its backward.

NCCL on GPU partitions (collectives on FSDP2's own streams, overlapped with compute), Gloo on
CPU ones (torch 2.13: every collective blocks, nothing overlaps). The rank times every
all-gather and reduce-scatter FSDP2 issues (rank.py says how); the run's verdict compares a
checksum of the unsharded parameters across ranks.
"""

from ..base import Mode, Option
from ..torch_options import BACKEND, RUN_DIMENSIONS

MODE = Mode(
    name="torch-fsdp",
    framework="torch",
    library="torch",
    description="PyTorch FSDP2 fully_shard: parameters all-gathered per unit in forward and "
    "backward, gradients reduce-scattered (NCCL or Gloo)",
    # Like torch-ddp: env:// rendezvous from the task variables, whatever started the ranks.
    launchers=("srun", "local", "mpirun", "torchrun"),
    data_format="raw",  # the same input pipeline as torch-ddp (--data)
    epochs=True,  # torch-ddp's epoch loop (rankside/torch/epochs.py) over the sharded model
    pattern="allgather-reducescatter",
    # On GPU streams (NCCL) all-gathers and reduce-scatters run behind compute; over Gloo
    # (CPU) every collective blocks the training thread: nothing is hidden.
    overlap=lambda options: "wfbp" if options.get("backend") == "nccl" else "none",
    # Seen on an H200 (torch 2.11.0+cu130, 2 ranks sharing the GPU, scripts/gpu-check,
    # tests/fixtures/gpu-h200): over Gloo on CUDA tensors both windows ran, then a rank died
    # of SIGSEGV before its footer, with no Python error: the run is lost. Refused up front.
    cpu_only_backends={"gloo": "over Gloo on CUDA tensors a rank died of SIGSEGV after its "
                               "last step (torch 2.11, H200), losing the run"},
    options=(
        BACKEND,
        Option(
            name="reshard_after_forward",
            choices=("yes", "no"),
            default="yes",
            help="yes: free each unit's unsharded parameters after its forward and all-gather "
            "them again for its backward (FSDP2's default, ZeRO-3); no: keep them until "
            "backward (fewer all-gathers, more memory)",
        ),
        *RUN_DIMENSIONS,
    ),
)
