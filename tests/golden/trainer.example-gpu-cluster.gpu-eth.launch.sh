#!/bin/bash
# One rank of run trainer-tiny-gpu-eth-n2-r0-df1e78a3 (trainer: a user's own training script, run as it is).
# srun (or job.sbatch's local launcher) starts one copy per rank; this maps its task variables
# to PyTorch's env:// rendezvous (what a torchrun-style script reads) and runs the rank,
# which starts the script and reads its figures from its output.
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
exec "$ORCH_PYTHON" -m orchestrator.modes.trainer.rank --run-id trainer-tiny-gpu-eth-n2-r0-df1e78a3 --log-dir /scratch/runs/trainer-tiny-gpu-eth-n2-r0-df1e78a3/ranks --model tiny --dataset cifar --batch-size 32 --iters 20 --warmup 5 --script '{"command":["python","train.py","--batch-size","{batch_size}"],"cwd":"/scratch/trainer","loss":{"json":"loss","regex":null,"scale":1.0},"mfu":null,"name":"tiny","throughput":{"json":null,"regex":"samples/s: ([0-9.]+)","scale":1.0,"scope":"job","unit":"samples/s"},"tokens_per_s":null,"tokens_per_sample":null}'
