#!/bin/bash
# One rank of run torch-ddp-lenet5-gpu-ib-n2-r0-e15cd380 (torch-ddp, backend nccl).
# srun (or job.sbatch's local launcher) starts one copy per rank; this maps its task variables
# to PyTorch's env:// rendezvous and runs the DDP workload.
set -euo pipefail
: "${SLURM_PROCID:?launch.sh is started by srun or by job.sbatch}"
: "${MASTER_ADDR:?set by job.sbatch}" "${MASTER_PORT:?set by job.sbatch}"
export RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS"
export LOCAL_RANK="$SLURM_LOCALID" NODE_RANK="$SLURM_NODEID"
exec "$ORCH_PYTHON" -m orchestrator.workloads.torch_ddp --run-id torch-ddp-lenet5-gpu-ib-n2-r0-e15cd380 --log-dir /scratch/runs/torch-ddp-lenet5-gpu-ib-n2-r0-e15cd380/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --backend nccl
