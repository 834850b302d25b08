"""TensorFlow ParameterServerStrategy over gRPC: a chief, workers and parameter servers.

The chief (coordinator) runs on the first node; every node runs ``tasks_per_node`` workers
(``--tasks-per-node``: one per GPU, or 1 on CPU partitions) and ``ps_per_node`` parameter
servers. The chief times the steps it schedules on the workers, so it is the task that logs
iterations, while speedup and efficiency count the workers. Workers update the parameters
asynchronously: their parameters are not expected to agree (not ``synchronous``).
"""

from ..base import Mode, Option, Task


def placement(nodes, tasks_per_node, options):
    """Task 0 is the chief on node 0; then, node by node, its workers and its ps tasks."""
    ps_per_node = int(options.get("ps_per_node", "1"))
    tasks = [Task("chief", 0, 0)]
    for node in range(nodes):
        tasks += [Task("worker", node * tasks_per_node + t, node) for t in range(tasks_per_node)]
        tasks += [Task("ps", node * ps_per_node + p, node) for p in range(ps_per_node)]
    return tasks


MODE = Mode(
    name="tf-ps",
    framework="tensorflow",
    description="TensorFlow ParameterServerStrategy: chief schedules steps on workers, "
                "variables on gRPC parameter servers (asynchronous updates)",
    library="tensorflow",
    launchers=("srun", "local"),
    synchronous=False,
    options=(
        Option(name="ps_per_node", choices=(), default="1",
               help="parameter-server tasks per node (workers per node: --tasks-per-node)"),
    ),
    placement=placement,
    pattern="parameter-server",
    training_roles=("worker",),
    iteration_roles=("chief",),
)
