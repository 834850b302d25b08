#!/bin/bash
# One task of run tf-allreduce-lenet5-ib-n2-r0-e79d75aa (tf-allreduce, implementation ring).
# srun (or job.sbatch's local launcher) starts one copy per task; this builds the task's
# TF_CONFIG (every worker's address, this task's index) and runs the MultiWorkerMirroredStrategy
# workload.
set -euo pipefail
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(worker:0 worker:1)
export ORCH_TASK_ID="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?launch.sh is started by srun, mpirun or job.sbatch}}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
# --- Cluster addresses for TF_CONFIG: task k listens on <host of its node>:<port_base + k>.
task_nodes=(0 1)
mapfile -t hosts < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
# Each node by its name on the ib fabric ({host}-ib: the site's fabric_hostname).
for i in "${!hosts[@]}"; do hosts[i]="${hosts[i]}"-ib; done
# A block of 128 ports chosen by the job id, in 10000-19999 (below Linux's ephemeral
# ports and the MASTER_PORT range): two jobs sharing nodes use different blocks.
port_base="${ORCH_TF_PORT_BASE:-$((10000 + SLURM_JOB_ID % 78 * 128))}"
addrs() {  # the JSON strings "host:port" of role $1's tasks, in role-index order
  local k role index out=()
  for k in "${!task_roles[@]}"; do
    IFS=: read -r role index <<<"${task_roles[k]}"
    if [[ $role == "$1" ]]; then
      out[index]="\"${hosts[${task_nodes[k]}]}:$((port_base + k))\""
    fi
  done
  local IFS=,
  echo "${out[*]}"
}
tf_config="{\"cluster\":{\"worker\":[$(addrs worker)]},\"task\":{\"type\":\"$ORCH_ROLE\",\"index\":$ORCH_ROLE_INDEX}}"
TF_CONFIG="$tf_config" exec "$ORCH_PYTHON" -m orchestrator.modes.tf_allreduce.rank --run-id tf-allreduce-lenet5-ib-n2-r0-e79d75aa --log-dir /scratch/runs/tf-allreduce-lenet5-ib-n2-r0-e79d75aa/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --implementation ring
