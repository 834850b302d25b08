#!/bin/bash
# One task of run mxnet-kvstore-lenet5-eth-n2-r0-09279abe (mxnet-kvstore, kvstore dist_sync, update on the worker).
# srun (or job.sbatch's local launcher) starts one copy per task of the task table:
#   task 0 = scheduler (first node), then 1 server(s) per node, then 1 worker(s) per node.
# MXNet's parameter server (ps-lite) takes every role from DMLC_* variables, set here.
set -euo pipefail
# Which task this is and its role in the job, from orch's task table (task id -> role:index),
# indexed by the id that mpirun (OMPI_COMM_WORLD_RANK), srun or job.sbatch (SLURM_PROCID) gives.
task_roles=(scheduler:0 server:0 server:1 worker:0 worker:1)
export ORCH_TASK_ID="${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?launch.sh is started by srun, mpirun or job.sbatch}}"
IFS=: read -r ORCH_ROLE ORCH_ROLE_INDEX <<<"${task_roles[$ORCH_TASK_ID]}"
export ORCH_ROLE ORCH_ROLE_INDEX
: "${MASTER_ADDR:?set by job.sbatch}" "${MASTER_PORT:?set by job.sbatch}"

# ZeroMQ binds and connects to numeric addresses only.
ipv4_of_host() {  # the IPv4 address a host name resolves to (the same on every node)
  if [[ $1 =~ ^[0-9]+(\.[0-9]+){3}$ ]]; then echo "$1"; return; fi
  getent ahostsv4 "$1" | awk 'NR == 1 { print $1 }'
}
ipv4_of_nic() {  # this node's IPv4 address on a network interface
  ip -4 -o addr show dev "$1" 2>/dev/null | awk 'NR == 1 { split($4, a, "/"); print a[1] }'
}

export DMLC_ROLE="$ORCH_ROLE"  # scheduler | server | worker
export DMLC_NUM_SERVER=2
export DMLC_NUM_WORKER=2
# The scheduler runs on the first node (job.sbatch's MASTER_ADDR) on the job's port: derived from
# the job id on Slurm, so two jobs on the same nodes do not clash; a free port on the local site.
DMLC_PS_ROOT_URI="$(ipv4_of_host "$MASTER_ADDR")"
export DMLC_PS_ROOT_URI="${DMLC_PS_ROOT_URI:?cannot resolve the first node $MASTER_ADDR to an IPv4 address}"
export DMLC_PS_ROOT_PORT="$MASTER_PORT"
# Servers and workers listen, and are reached, on the partition's NIC.
export DMLC_INTERFACE=eth0
DMLC_NODE_HOST="$(ipv4_of_nic "$DMLC_INTERFACE")"
export DMLC_NODE_HOST="${DMLC_NODE_HOST:?no IPv4 address on interface $DMLC_INTERFACE of $(hostname)}"

# --- Run the task. A KVStore task that dies (signal, crash) leaves the others waiting forever
# in dist_sync; the launcher (srun --kill-on-bad-exit, or the local launcher) then stops them,
# and their logs end without a footer. So that the run's reason names the task that died
# first, not one that was stopped: if this task's Python ends abnormally without a footer,
# and not because the launcher stopped it, its footer is written here.
log=/scratch/runs/mxnet-kvstore-lenet5-eth-n2-r0-09279abe/ranks/rank-"$ORCH_TASK_ID".jsonl
stopped=0
trap 'stopped=1; kill -TERM "$child" 2>/dev/null || true' TERM INT HUP
"$ORCH_PYTHON" -m orchestrator.modes.mxnet_kvstore.rank --run-id mxnet-kvstore-lenet5-eth-n2-r0-09279abe --log-dir /scratch/runs/mxnet-kvstore-lenet5-eth-n2-r0-09279abe/ranks --model lenet5 --dataset cifar --batch-size 32 --iters 20 --warmup 5 --kvstore dist_sync --servers-per-node 1 --update worker &
child=$!
status=0
wait "$child" || status=$?
if ((stopped)); then
  wait "$child" 2>/dev/null || true
  exit 143
fi
if ((status != 0)) && ! tail -n 1 "$log" 2>/dev/null | grep -q '"type":"footer"'; then
  how="exited with status $status"
  if ((status > 128)); then
    how="was killed by signal $((status - 128)) (SIG$(kill -l $((status - 128))))"
  fi
  if [[ -s $log && -n $(tail -c 1 "$log") ]]; then echo >>"$log"; fi  # a torn last line
  printf '{"type":"footer","status":"error","error":"%s","ended_at":%s}\n' \
    "task $ORCH_TASK_ID ($ORCH_ROLE $ORCH_ROLE_INDEX) on $(hostname) $how before writing its footer (its output: ranks/rank-$ORCH_TASK_ID.out)" \
    "$(date +%s.%N)" >>"$log"
fi
exit "$status"
