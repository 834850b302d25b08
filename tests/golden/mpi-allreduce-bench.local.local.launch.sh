#!/bin/bash
# One rank of run mpi-allreduce-bench-lenet5-local-n2-r0-4f5ba148 (mpi-allreduce-bench, MPI_Allreduce of 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216 bytes, 5 times each).
# srun --mpi=pmix or mpirun starts one copy per rank; MPI itself tells each process its rank
# and the world (mpi4py's COMM_WORLD), so only orch's bookkeeping is set here.
set -euo pipefail
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(worker:0 worker:1)
export ORCH_TASK_ID="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?launch.sh is started by srun, mpirun or job.sbatch}}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
# The node this rank is on, from the task table: Open MPI's OMPI_COMM_WORLD_NODE_RANK is a
# per-node process index, and on the local site all "nodes" are this machine.
task_nodes=(0 1)
export NODE_RANK="${task_nodes[$ORCH_TASK_ID]}"
exec "$ORCH_PYTHON" -m orchestrator.modes.mpi_allreduce_bench.rank --run-id mpi-allreduce-bench-lenet5-local-n2-r0-4f5ba148 --log-dir /scratch/runs/mpi-allreduce-bench-lenet5-local-n2-r0-4f5ba148/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --reps 5 --sizes 4:16:64:256:1024:4096:16384:65536:262144:1048576:4194304:16777216
