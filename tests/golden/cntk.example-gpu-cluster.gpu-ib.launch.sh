#!/bin/bash
# One rank of run cntk-lenet5-gpu-ib-n2-r0-b0b534e0 (cntk, learner data_parallel).
# srun --mpi=pmix or mpirun starts one copy per rank; CNTK's MPI communicator tells each
# process its rank and the world, so only orch's bookkeeping is set here.
set -euo pipefail
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(worker:0 worker:1 worker:2 worker:3 worker:4 worker:5 worker:6 worker:7)
export ORCH_TASK_ID="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?launch.sh is started by srun, mpirun or job.sbatch}}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
task_nodes=(0 0 0 0 1 1 1 1)
export NODE_RANK="${task_nodes[$ORCH_TASK_ID]}"
# CNTK 2.7 is linked against Open MPI 1.10's sonames (libmpi.so.12, libmpi_cxx.so.1). An
# environment built by orch has them as symlinks to the system's Open MPI 4 inside its venv
# (templates/envs/cntk-mpi-shim.sh): put that directory first for this rank's loader.
# (A Python from modules or a container has no such directory: nothing changes.)
mpi_shim=
[[ $ORCH_PYTHON != /*/bin/* ]] || mpi_shim="${ORCH_PYTHON%/bin/*}/lib/mpi-shim"
if [[ -n $mpi_shim && -d $mpi_shim ]]; then
  export LD_LIBRARY_PATH="$mpi_shim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
exec "$ORCH_PYTHON" -m orchestrator.modes.cntk.rank --run-id cntk-lenet5-gpu-ib-n2-r0-b0b534e0 --log-dir /scratch/runs/cntk-lenet5-gpu-ib-n2-r0-b0b534e0/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --learner data_parallel
