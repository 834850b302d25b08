#!/bin/bash
# One rank of run torch-ddp-lenet5-eth-n2-r0-3b465339 (torch-ddp, backend gloo).
# srun (or job.sbatch's local launcher) starts one copy per rank; this maps its task variables
# to PyTorch's env:// rendezvous and runs the DDP workload.
set -euo pipefail
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(worker:0 worker:1)
export ORCH_TASK_ID="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?launch.sh is started by srun, mpirun or job.sbatch}}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
: "${MASTER_ADDR:?set by job.sbatch}" "${MASTER_PORT:?set by job.sbatch}"
# Started by mpirun: the world from Open MPI's variables, the node from orch's task table
# (OMPI_COMM_WORLD_NODE_RANK is a per-node process index; SLURM_* are the batch script's).
task_nodes=(0 1)
export RANK="$ORCH_TASK_ID" WORLD_SIZE="$OMPI_COMM_WORLD_SIZE"
export LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" NODE_RANK="${task_nodes[$ORCH_TASK_ID]}"
exec "$ORCH_PYTHON" -m orchestrator.modes.torch_ddp.rank --run-id torch-ddp-lenet5-eth-n2-r0-3b465339 --log-dir /scratch/runs/torch-ddp-lenet5-eth-n2-r0-3b465339/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --backend gloo --trace no
