"""Where a rank is bound: the kernel's CPU lists, the NUMA nodes of its CPUs and which GPU
CUDA_VISIBLE_DEVICES gives it (the header's ``binding``, found by
:func:`orchestrator.rankside.sampler.probe`).

The one parser of the kernel's CPU lists (:func:`parse_cpulist`): orchestrator.rankside.cores
reads sysfs's with it too.

Same rules as :mod:`orchestrator.rankside.harness`, which imports it: stdlib only, valid
Python 3.6 (CNTK), annotations as strings.
"""

import os
import re

NODE_SYSFS = "/sys/devices/system/node"


def parse_cpulist(text: str) -> list:
    """``0-3,8`` (the kernel's cpulist format: sysfs CPU and NUMA lists, an affinity as the
    header records it) -> [0, 1, 2, 3, 8]; [] for an empty one (a NUMA node without CPUs);
    ValueError where it is not a cpulist."""
    text = text.strip()
    if not text:
        return []
    cpus = set()
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            raise ValueError(f"not a CPU list: {text!r}")
        first = int(match.group(1))
        cpus.update(range(first, int(match.group(2) or first) + 1))
    return sorted(cpus)


def compact_cpus(cpus) -> str:
    """[0, 1, 2, 3, 8] -> ``0-3,8``."""
    out, run = [], []
    for cpu in sorted(set(cpus)):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [cpu]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def numa_nodes(cpus, root: str = NODE_SYSFS) -> "list | None":
    """The NUMA nodes whose CPUs (``node<n>/cpulist``) hold any of ``cpus``; None where the
    kernel shows no NUMA topology."""
    try:
        names = os.listdir(root)
    except OSError:
        return None
    wanted, found = set(cpus), []
    for name in names:
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        try:
            with open(os.path.join(root, name, "cpulist")) as fh:
                if wanted & set(parse_cpulist(fh.read())):
                    found.append(int(name[4:]))
        except (OSError, ValueError):
            continue
    return sorted(found) if any(n.startswith("node") for n in names) else None


def visible_gpu(env_value: "str | None", local_rank: int, count: int) -> tuple:
    """Which NVML device the rank uses: ("index", n) or ("uuid", s), or (None, reason).

    As torch_common.rank_device: the rank takes visible device ``local_rank % visible``.
    CUDA_VISIBLE_DEVICES lists indices or UUIDs; its indices are NVML's where the CUDA
    order is PCI's (CUDA_DEVICE_ORDER=PCI_BUS_ID, and on every one-GPU machine)."""
    if env_value is None:
        if count < 1:
            return None, "NVML sees no GPU"
        return "index", local_rank % count
    entries = [e.strip() for e in env_value.split(",") if e.strip()]
    # CUDA stops at the first invalid entry: "-1" or "" hides every GPU.
    usable = []
    for entry in entries:
        if entry.startswith(("GPU-", "MIG-")) or entry.isdigit():
            usable.append(entry)
        else:
            break
    if not usable:
        return None, f"CUDA_VISIBLE_DEVICES={env_value!r} hides every GPU"
    entry = usable[local_rank % len(usable)]
    return ("index", int(entry)) if entry.isdigit() else ("uuid", entry)
