"""When a prediction's assumptions do not hold: the checks, their thresholds and their words.

Why: the model assumes a network that the α–β fit describes, ranks that each have a core (or
a GPU) of their own on nodes no other job uses, and compute, not input, setting the pace. Where
one of these is known to fail before the run, the prediction still states its number (it is
the model's best guess) but is *flagged*, and the scorecard scores flagged predictions apart
from valid ones: a miss where the model said it could not hold is not a miss of the model.

Two kinds of flag, each a line that starts with its kind:

* ``network model unreliable: …`` — the pre-flight's fit fails :data:`MIN_R2` or
  :data:`MAX_RESIDUAL` (after the pre-flight measured once more with more repeats), or the
  pre-flight measured another library's all-reduce than the one the mode communicates with
  and the run it is predicted from sent nothing between nodes (:func:`unmeasured_library`);
* ``assumption broken: …`` — the run's ranks outnumber the cores (physical: hyper-threads
  counted once; a node's CPU share where its ranks were found confined to one) or GPUs given
  to them, the run it is predicted from shared its node with
  other runs (``co_tenants``), or its input I/O took more than :data:`MAX_IO_SHARE` of its
  iteration.

Pure functions: numbers in, lines out (a run's co-tenants read by the result set's one
parser of them, results.runs.co_tenant_ids).
"""

from __future__ import annotations

import math

from ..results.runs import co_tenant_ids

#: A fit below this R² (on log-seconds, preflight.fit_quality) does not describe the network.
MIN_R2 = 0.9
#: ... nor one whose worst relative residual is above this.
MAX_RESIDUAL = 0.5
#: Input I/O above this share of t_iter in the measured run: the data pipeline sets the pace.
MAX_IO_SHARE = 0.5

UNRELIABLE = "network model unreliable"
BROKEN = "assumption broken"


def fit_problem(level: str, r2: float, worst: float) -> str | None:
    """The flag of one pre-flight level's fit, or None when it passes both thresholds."""
    if (math.isfinite(r2) and r2 >= MIN_R2) and (math.isfinite(worst) and worst <= MAX_RESIDUAL):
        return None
    return (f"{UNRELIABLE}: R² = {r2:.3f}, worst residual {worst:.0%} ({level} fit; needs "
            f"R² ≥ {MIN_R2} and worst residual ≤ {MAX_RESIDUAL:.0%})")


def unmeasured_library(framework: str, measured: str, base_nodes: int,
                       nodes: int) -> str | None:
    """The flag of a prediction across nodes, from a run on one node, of a mode whose own
    communication (``framework``'s: TensorFlow's collective ring, MXNet's kvstore) the
    pre-flight did not measure (it measured ``measured``): nothing yet says how fast that
    library moves a gradient between nodes, and libraries over the same link differ by
    1.5-3x. A run across nodes measured it (a prediction from one is not flagged)."""
    if nodes <= 1 or base_nodes > 1:
        return None
    return (f"{UNRELIABLE}: the pre-flight measured {measured}, not {framework}'s own "
            f"communication, and the run it is predicted from ran on one node: how fast "
            f"{framework} moves the gradient between nodes is not known before a run of it "
            "across nodes")


def oversubscribed(ranks: int, tasks_per_node: int, *, cpus_per_node: int | None,
                   gpus_per_node: int, shared_machine_cpus: int | None,
                   shared_machine_logical: int | None = None,
                   node_cpu_share: float | None = None) -> str | None:
    """The flag of a run whose ranks outnumber what they were given: its node's GPUs (GPU
    partitions: one rank a GPU), its node's cores, or, where the nodes are one machine (the
    local site), that machine's physical cores for all ranks together
    (``shared_machine_cpus``; ``shared_machine_logical``, its logical CPUs, is said beside
    them where hyper-threads make it more: two threads of one core are not two cores).
    ``node_cpu_share``: the cores a node's ranks were found confined to (a cgroup quota or
    cpuset, read on the node), which replaces the site's ``cpus_per_node`` where smaller: more
    than one rank on a share of under two cores take turns on it."""
    if gpus_per_node > 0 and tasks_per_node > gpus_per_node:
        return (f"{BROKEN}: {tasks_per_node} ranks a node on {gpus_per_node} GPU(s): ranks "
                "share GPUs")
    if shared_machine_cpus and ranks > shared_machine_cpus:
        logical = shared_machine_logical or shared_machine_cpus
        cores = (f"{shared_machine_cpus} physical cores ({logical} logical)"
                 if logical != shared_machine_cpus else f"{shared_machine_cpus} cores")
        return (f"{BROKEN}: {ranks} ranks on {cores} (the nodes are one machine): "
                f"{ranks / shared_machine_cpus:.3g} ranks a core")
    if (gpus_per_node == 0 and node_cpu_share and tasks_per_node > 1
            and tasks_per_node > node_cpu_share + 1e-9
            and (not cpus_per_node or node_cpu_share < cpus_per_node)):
        return (f"{BROKEN}: {tasks_per_node} ranks a node on {node_cpu_share:.3g} cores a node "
                f"(the CPU share its ranks run under): {tasks_per_node / node_cpu_share:.3g} "
                "ranks a core")
    if gpus_per_node == 0 and cpus_per_node and tasks_per_node > cpus_per_node:
        return (f"{BROKEN}: {tasks_per_node} ranks a node on {cpus_per_node} cores a node: "
                f"{tasks_per_node / cpus_per_node:.3g} ranks a core")
    return None


def base_run_problems(from_ranks: int, t_io: float | None, t_iter: float | None,
                      co_tenants: str | None) -> list[str]:
    """Flags of the measured run a prediction starts from: it shared its node, or its input
    I/O dominated its iteration."""
    out = []
    co = co_tenant_ids(co_tenants)
    if co:
        out.append(f"{BROKEN}: the {from_ranks}-rank run it is predicted from shared its "
                   f"node(s) with {', '.join(co)} (co_tenants)")
    if t_io is not None and t_iter and math.isfinite(t_io) and t_io / t_iter > MAX_IO_SHARE:
        out.append(f"{BROKEN}: input I/O is {t_io / t_iter:.0%} of t_iter in the "
                   f"{from_ranks}-rank run (above {MAX_IO_SHARE:.0%}): the data pipeline, not "
                   "compute and communication, sets the pace")
    return out


def shared_after(co_tenants: str | None) -> str | None:
    """The flag of a run found, once it ran, to have shared its node(s) (its co_tenants)."""
    co = co_tenant_ids(co_tenants)
    if not co:
        return None
    return (f"{BROKEN}: the run shared its node(s) with {', '.join(co)} (co_tenants, found "
            "after it ran)")
