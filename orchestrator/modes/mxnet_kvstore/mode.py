"""MXNet KVStore parameter server: one scheduler, servers and workers, roles by environment.

ps-lite (MXNet's parameter server) takes every role from ``DMLC_*`` variables, which
``templates/modes/mxnet-kvstore.sh.j2`` sets per task from the task table below:

* task 0: the **scheduler**, on the first node (``DMLC_PS_ROOT_URI``/``_PORT`` point at it);
* then the **servers**: ``servers_per_node`` on every node, or ``servers`` in all, placed
  round-robin over the nodes (server s on node s mod nodes; keys are spread over all servers);
* then ``tasks_per_node`` **workers** on every node: the only tasks that train and log
  iterations.

``kvstore=dist_sync`` aggregates every worker's gradients each step (all workers end with the
same parameters); ``dist_async`` applies each push as it arrives (workers' parameters differ, so
the run is not checked for equal checksums). ``update`` says where the optimizer runs:
``worker`` (servers only sum gradients; a worker pushes/pulls gradients, then updates locally:
communication and update are timed apart) or ``server`` (MXNet's default for a dist kvstore:
workers push gradients and pull updated weights; the update is inside the communication).
dist_async can only update on the servers (an MXNet restriction), so that is its default;
dist_sync defaults to ``worker``.
"""

from ...errors import UserError
from ..base import Mode, Option, Task, one_server_count, precision_option, server_nodes

KVSTORES = ("dist_sync", "dist_async")


def placement(nodes, tasks_per_node, options):
    """Scheduler (node 0), then the servers, then the workers, each group node-major."""
    where = server_nodes(nodes, options)
    tasks = [Task("scheduler", 0, 0)]
    tasks += [Task("server", s, n) for n in range(nodes)
              for s in range(len(where)) if where[s] == n]
    tasks += [Task("worker", n * tasks_per_node + t, n)
              for n in range(nodes) for t in range(tasks_per_node)]
    return tasks


def is_synchronous(options):
    return options.get("kvstore", "dist_sync") != "dist_async"


def resolve(mode, given, out):
    """The default of ``update`` depends on ``kvstore`` (dist_async cannot update on workers);
    ``servers`` (in all) replaces ``servers_per_node``."""
    out = one_server_count(mode, given, out, "servers", "servers_per_node")
    if "update" not in given:
        out["update"] = "server" if out["kvstore"] == "dist_async" else "worker"
    elif out["kvstore"] == "dist_async" and out["update"] == "worker":
        raise UserError(f"mode '{mode.name}': update=worker is not possible with "
                        "kvstore=dist_async (MXNet applies asynchronous pushes on the "
                        "servers); use update=server, or kvstore=dist_sync")
    if out.get("precision") == "fp16" and out["update"] == "server":
        raise UserError(f"mode '{mode.name}': precision=fp16 is not possible with "
                        "update=server (AMP's loss scale changes the gradients' rescale, which "
                        "the servers' optimizer takes once); use update=worker with dist_sync")
    return out


MODE = Mode(
    name="mxnet-kvstore",
    framework="mxnet",
    description="MXNet Gluon over the KVStore parameter server (scheduler, servers, workers)",
    library="mxnet",
    data_format="recordio",  # Gluon over MXNet RecordIO (orch data make --format recordio)
    epochs=True,
    launchers=("srun", "local"),
    synchronous=True,  # dist_sync; per run: synchronous_if
    synchronous_if=is_synchronous,
    options=(
        Option(name="kvstore", choices=KVSTORES, default="dist_sync",
               help="dist_sync: gradients of all workers aggregated every step; dist_async: "
                    "each worker's push applied as it arrives"),
        Option(name="update", choices=("worker", "server"),
               help="where the optimizer runs; default worker for dist_sync (communication "
                    "and update timed apart), server for dist_async (the only choice there)"),
        Option(name="servers_per_node", choices=(), default="1",
               help="KVStore servers per node (keys are spread over all servers)"),
        Option(name="servers", choices=(), default=None,
               help="KVStore servers in all, placed round-robin over the nodes (replaces "
                    "servers_per_node; a sweep dimension: servers=1,2)"),
        # MXNet's AMP (rankside/mxnet/precision.py): bf16 on oneDNN builds (CPUs with
        # AVX-512), fp16 on GPUs; a node or build without it stops the run in one line
        # naming the mode.
        precision_option(exclude=("tf32",),
                         help="fp32; bf16 or fp16: MXNet AMP (mxnet.contrib.amp; fp16 with its "
                              "dynamic loss scaling, on GPUs and with update=worker; bf16 on "
                              "oneDNN builds, CPUs with AVX-512)"),
    ),
    placement=placement,
    resolve=resolve,
    pattern="parameter-server",
    # loss.backward() only queues the backward operators; each gradient's push starts in
    # MXNet's engine as soon as that gradient exists, while backward goes on.
    overlap="wfbp",
    training_roles=("worker",),
    # Workers push gradients to the servers and pull parameters back: one worker still
    # communicates.
    exchange_roles=("worker", "server"),
)
