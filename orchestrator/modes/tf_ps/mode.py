"""TensorFlow ParameterServerStrategy over gRPC: a chief, workers and parameter servers.

The chief (coordinator) runs on the first node; every node runs ``tasks_per_node`` workers
(``--tasks-per-node``: one per GPU, or 1 on CPU partitions) and ``ps_per_node`` parameter
servers, or ``servers`` parameter servers in all, placed round-robin over the nodes. The chief
times the steps it schedules on the workers, so it is the task that logs
iterations, while speedup and efficiency count the workers. Workers update the parameters
asynchronously: their parameters are not expected to agree (not ``synchronous``).
"""

from ..base import Mode, Option, Task, one_server_count, server_nodes
from ..tf_options import RUN_DIMENSIONS


def placement(nodes, tasks_per_node, options):
    """Task 0 is the chief on node 0; then, node by node, its workers and its ps tasks (ps p
    on node p mod nodes with ``servers``; ``ps_per_node`` on every node otherwise)."""
    where = server_nodes(nodes, options, "servers", "ps_per_node")
    tasks = [Task("chief", 0, 0)]
    for node in range(nodes):
        tasks += [Task("worker", node * tasks_per_node + t, node) for t in range(tasks_per_node)]
        tasks += [Task("ps", p, node) for p in range(len(where)) if where[p] == node]
    return tasks


def resolve(mode, given, out):
    """``servers`` (in all) replaces ``ps_per_node``."""
    return one_server_count(mode, given, out, "servers", "ps_per_node")


MODE = Mode(
    name="tf-ps",
    framework="tensorflow",
    description="TensorFlow ParameterServerStrategy: chief schedules steps on workers, "
                "variables on gRPC parameter servers (asynchronous updates)",
    library="tensorflow",
    launchers=("srun", "local"),
    synchronous=False,
    data_format="tfrecord",  # the per-worker datasets read TFRecord (--data)
    epochs=True,
    options=(
        Option(name="ps_per_node", choices=(), default="1",
               help="parameter-server tasks per node (workers per node: --tasks-per-node)"),
        Option(name="servers", choices=(), default=None,
               help="parameter-server tasks in all, placed round-robin over the nodes "
                    "(replaces ps_per_node; a sweep dimension: servers=1,2)"),
        *RUN_DIMENSIONS,
    ),
    placement=placement,
    resolve=resolve,
    pattern="parameter-server",
    # TensorFlow's own step reads each variable as forward reaches it and sends each gradient
    # to its ps as backward produces it (the breakdown window serialises both to time them).
    overlap="wfbp",
    training_roles=("worker",),
    # Workers push gradients to the servers and pull parameters back: one worker still
    # communicates.
    exchange_roles=("worker", "ps"),
    iteration_roles=("chief",),
)
