#!/bin/bash
# One rank of run chainermn-lenet5-local-n2-r0-f0227225 (chainermn, communicator naive).
# srun --mpi=pmix or mpirun starts one copy per rank; ChainerMN's communicator (mpi4py) tells
# each process its rank and the world, so only orch's bookkeeping is set here.
set -euo pipefail
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(worker:0 worker:1)
export ORCH_TASK_ID="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?launch.sh is started by srun, mpirun or job.sbatch}}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
task_nodes=(0 1)
export NODE_RANK="${task_nodes[$ORCH_TASK_ID]}"
exec "$ORCH_PYTHON" -m orchestrator.modes.chainermn.rank --run-id chainermn-lenet5-local-n2-r0-f0227225 --log-dir /scratch/runs/chainermn-lenet5-local-n2-r0-f0227225/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --communicator naive
