#!/bin/bash
# One rank of run torch-ddp-lenet5-eth-n2-r0-41c6b110 (torch-ddp, backend gloo).
# srun (or job.sbatch's local launcher) starts one copy per rank; this maps its task variables
# to PyTorch's env:// rendezvous and runs the DDP workload.
set -euo pipefail
: "${SLURM_PROCID:?launch.sh is started by srun or by job.sbatch}"
: "${MASTER_ADDR:?set by job.sbatch}" "${MASTER_PORT:?set by job.sbatch}"
export RANK="$SLURM_PROCID" WORLD_SIZE="$SLURM_NTASKS"
export LOCAL_RANK="$SLURM_LOCALID" NODE_RANK="$SLURM_NODEID"
exec "$ORCH_PYTHON" -m orchestrator.workloads.torch_ddp --run-id torch-ddp-lenet5-eth-n2-r0-41c6b110 --log-dir /scratch/runs/torch-ddp-lenet5-eth-n2-r0-41c6b110/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --backend gloo
