#!/bin/bash
# One rank of run torch-fsdp-lenet5-gpu-ib-n2-r0-28a82d64 (torch-fsdp, backend nccl, reshard after forward: yes).
# srun (or job.sbatch's local launcher) starts one copy per rank; this maps its task variables
# to PyTorch's env:// rendezvous and runs the FSDP2 rank.
set -euo pipefail
# Started by torchrun, which set RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK and the rendezvous'
# MASTER_ADDR/MASTER_PORT; this rank's output goes where srun's --output puts a rank's.
exec >/scratch/runs/torch-fsdp-lenet5-gpu-ib-n2-r0-28a82d64/ranks/rank-"${RANK:?launch.sh is started by torchrun}.out" 2>&1
[[ -z ${ORCH_OMP_NUM_THREADS_UNSET:-} ]] || unset OMP_NUM_THREADS
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(worker:0 worker:1 worker:2 worker:3 worker:4 worker:5 worker:6 worker:7)
export ORCH_TASK_ID="${RANK:?launch.sh is started by torchrun}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
: "${MASTER_ADDR:?set by job.sbatch}" "${MASTER_PORT:?set by job.sbatch}"
export NODE_RANK="$GROUP_RANK"
exec "$ORCH_PYTHON" -m orchestrator.modes.torch_fsdp.rank --run-id torch-fsdp-lenet5-gpu-ib-n2-r0-28a82d64 --log-dir /scratch/runs/torch-fsdp-lenet5-gpu-ib-n2-r0-28a82d64/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --backend nccl --reshard-after-forward yes
