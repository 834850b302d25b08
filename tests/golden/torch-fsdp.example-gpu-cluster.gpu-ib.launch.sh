#!/bin/bash
# One rank of run torch-fsdp-lenet5-gpu-ib-n2-r0-ec3c1e9a (torch-fsdp, backend nccl, reshard after forward: yes).
# srun (or job.sbatch's local launcher) starts one copy per rank; this maps its task variables
# to PyTorch's env:// rendezvous and runs the FSDP2 rank.
set -euo pipefail
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(worker:0 worker:1 worker:2 worker:3 worker:4 worker:5 worker:6 worker:7)
export ORCH_TASK_ID="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?launch.sh is started by srun, mpirun or job.sbatch}}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
: "${MASTER_ADDR:?set by job.sbatch}" "${MASTER_PORT:?set by job.sbatch}"
export RANK="$ORCH_TASK_ID" WORLD_SIZE="$SLURM_NTASKS"
export LOCAL_RANK="$SLURM_LOCALID" NODE_RANK="$SLURM_NODEID"
exec "$ORCH_PYTHON" -m orchestrator.modes.torch_fsdp.rank --run-id torch-fsdp-lenet5-gpu-ib-n2-r0-ec3c1e9a --log-dir /scratch/runs/torch-fsdp-lenet5-gpu-ib-n2-r0-ec3c1e9a/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --backend nccl --reshard-after-forward yes
