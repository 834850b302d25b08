#!/bin/bash
# One rank of run allreduce-bench-lenet5-gpu-ib-n2-r0-55cfc699 (allreduce-bench, backend nccl).
# srun (or job.sbatch's local launcher) starts one copy per rank; this maps its task variables
# to torch.distributed's env:// rendezvous and runs the all-reduce micro-benchmark: every
# iteration all-reduces float32 buffers of 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216 bytes, 5 times each.
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
exec "$ORCH_PYTHON" -m orchestrator.modes.allreduce_bench.rank --run-id allreduce-bench-lenet5-gpu-ib-n2-r0-55cfc699 --log-dir /scratch/runs/allreduce-bench-lenet5-gpu-ib-n2-r0-55cfc699/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --backend nccl --reps 5 --sizes 4:16:64:256:1024:4096:16384:65536:262144:1048576:4194304:16777216
