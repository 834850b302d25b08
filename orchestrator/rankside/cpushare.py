"""The CPU a process may really use: its cgroup's CPU quota and its CPU affinity, in cores.

Why: a node of a cluster that confines jobs with cgroups (Slurm's cgroup plugins, the test
cluster's per-node quotas) gives a rank less than the machine's cores, and a CFS quota does not
show in ``os.cpu_count()`` nor in the affinity mask: 0.45 of a core looks like two whole cores
to every API but this one. The performance model must know what a node really has before it
says whether ranks contend for compute.

What is read, on the node, by the rank itself (stdlib only, valid Python 3.6 like the harness):

* cgroup v1: ``/proc/self/cgroup``'s ``cpu`` (or ``cpu,cpuacct``) line gives the process's path
  in that hierarchy; ``cpu.cfs_quota_us / cpu.cfs_period_us`` of that cgroup and of every
  ancestor up to the hierarchy's root (a limit holds its whole subtree: the smallest counts);
* cgroup v2: the ``0::`` line; ``cpu.max`` (``QUOTA PERIOD`` or ``max PERIOD``) of the cgroup
  and its ancestors;
* the affinity mask (``os.sched_getaffinity``): the CPUs the process may run on (a cpuset).

The share is the smallest of the quotas (in cores) and the affinity's CPU count; ``limited`` says
whether a quota, rather than the affinity, sets it. Where the hierarchy is not mounted where
``/proc/self/mounts`` says (a container without it), no quota is seen and the basis says so.
"""

import os

QUOTA_V1 = "cpu.cfs_quota_us"
PERIOD_V1 = "cpu.cfs_period_us"
MAX_V2 = "cpu.max"


def _read(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def parse_proc_cgroup(text):
    """``/proc/self/cgroup`` -> (v1 path of the cpu controller or None, v2 path or None)."""
    v1 = v2 = None
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and parts[0] == "0":
            v2 = path
        elif "cpu" in controllers.split(","):
            v1 = path
    return v1, v2


def parse_mounts(text):
    """``/proc/self/mounts`` -> (mount point of the v1 cpu hierarchy, of the v2 hierarchy)."""
    v1 = v2 = None
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        point, fstype, options = fields[1], fields[2], fields[3].split(",")
        if fstype == "cgroup" and "cpu" in options and v1 is None:
            v1 = point
        elif fstype == "cgroup2" and v2 is None:
            v2 = point
    return v1, v2


def quota_v1(quota, period):
    """Cores of a v1 quota and period (their files' texts), or None without a limit."""
    try:
        q, p = int(quota), int(period)
    except (TypeError, ValueError):
        return None
    return q / p if q > 0 and p > 0 else None


def quota_v2(text):
    """Cores of a v2 ``cpu.max`` text (``QUOTA PERIOD``; ``max`` is no limit), or None."""
    fields = (text or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        q, p = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _ancestors(root, path):
    """The cgroup directory of ``path`` under mount ``root``, then each parent up to ``root``."""
    parts = [p for p in (path or "/").split("/") if p]
    while True:
        yield os.path.join(root, *parts) if parts else root
        if not parts:
            return
        parts.pop()


def tightest_quota(root, path, version):
    """(cores, the cgroup directory that sets it) of the smallest quota on the way from the
    process's cgroup to the hierarchy's root; (None, None) where none is set or readable."""
    best = (None, None)
    for directory in _ancestors(root, path):
        if version == 1:
            cores = quota_v1(_read(os.path.join(directory, QUOTA_V1)),
                             _read(os.path.join(directory, PERIOD_V1)))
        else:
            cores = quota_v2(_read(os.path.join(directory, MAX_V2)))
        if cores is not None and (best[0] is None or cores < best[0]):
            best = (cores, directory)
    return best


def affinity_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def probe(proc_cgroup=None, mounts=None, cpus=None):
    """The CPU this process may use: ``{"cores": float, "affinity_cpus": int, "quota_cores":
    float or None, "cgroup": path or None, "limited": bool, "basis": text}``. The arguments
    replace what is read from /proc (for tests)."""
    v1_path, v2_path = parse_proc_cgroup(
        proc_cgroup if proc_cgroup is not None else _read("/proc/self/cgroup"))
    v1_root, v2_root = parse_mounts(mounts if mounts is not None else _read("/proc/self/mounts"))
    cpus = cpus if cpus is not None else affinity_cpus()
    quota, where, basis, note = None, None, "", ""
    if v1_path is not None and v1_root:
        quota, where = tightest_quota(v1_root, v1_path, 1)
        basis = "cgroup v1 cpu quota"
    elif v2_path is not None and v2_root:
        quota, where = tightest_quota(v2_root, v2_path, 2)
        basis = "cgroup v2 cpu.max"
    elif v1_path is not None or v2_path is not None:
        note = "; no CPU quota seen: the process's cgroup hierarchy is not mounted here"
    limited = quota is not None and (cpus is None or quota < cpus)
    cores = quota if limited else float(cpus or 0) or None
    if limited:
        basis = f"{basis} {quota:.3g} core(s) at {where}"
    elif quota is None:
        basis = f"affinity: {cpus} CPU(s){note}"
    else:
        basis = f"affinity: {cpus} CPU(s), below the {basis}"
    return {"cores": round(cores, 4) if cores else None, "affinity_cpus": cpus,
            "quota_cores": round(quota, 4) if quota is not None else None,
            "cgroup": where, "limited": limited, "basis": basis}


def safe_probe():
    """:func:`probe`, or None on any error: evidence never fails a rank."""
    try:
        return probe()
    except Exception:
        return None
