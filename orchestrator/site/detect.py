"""``orch site detect``: a draft site config from the live Slurm.

What Slurm knows is read, not guessed: partitions, node counts, CPUs and memory per node,
GRES GPUs, features, the default partition and time limits (``sinfo``). What only a node
knows (its network interfaces, whether it has InfiniBand) comes from a small probe job on one
node of each partition: ``srun -p P -N1 sh -c 'ls /sys/class/net; ls /sys/class/infiniband'``.
Every value that is a guess (the socket interface, the interconnect, a per-job time limit,
the Python that runs the frameworks) carries a YAML comment saying so and why. The draft is
validated as a site config before it is written, by default to the user's directory of the site
search path (``~/.config/orch/sites/<name>.yaml``), where ``--site <name>`` finds it; an
existing file is never replaced unless asked to.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..backends.slurm import timelimit
from ..errors import UserError
from ..files import create_text_atomic, write_text_atomic

SINFO_FORMAT = "%P|%D|%c|%m|%G|%f|%l"
PROBE = "ls /sys/class/net; echo ---; ls /sys/class/infiniband 2>/dev/null; true"


class NoSlurm(Exception):
    """Slurm's commands are not on this machine, or its controller does not answer."""


@dataclass
class PartitionFacts:
    name: str
    default: bool = False
    nodes: int = 0
    cpus: list[int] = field(default_factory=list)
    memory_mb: list[int] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    features: set[str] = field(default_factory=set)
    time_limit: str = "infinite"
    interfaces: list[str] | None = None  # from the probe; None: it did not run
    ib_devices: list[str] = field(default_factory=list)
    probe_error: str = ""


def _run(cmd: list[str], timeout: float) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise NoSlurm(f"'{cmd[0]}' is not installed here") from None
    except subprocess.TimeoutExpired:
        raise NoSlurm(f"'{' '.join(cmd)}' did not answer in {timeout:.0f} s") from None
    if res.returncode != 0:
        raise NoSlurm(f"'{' '.join(cmd[:2])}' failed: "
                      f"{(res.stderr or res.stdout).strip().splitlines()[-1:] or ['?']}")
    return res.stdout


def gpus_of(gres: str) -> int:
    """GPUs per node from a GRES field: ``gpu:a100:4(S:0-1),nic:1`` -> 4; ``(null)`` -> 0."""
    total = 0
    for item in gres.split(","):
        item = re.sub(r"\(.*?\)", "", item.strip())
        parts = item.split(":")
        if parts[0] == "gpu":
            count = parts[-1] if len(parts) > 1 else "1"
            total += int(count) if count.isdigit() else 1
    return total


def parse_sinfo(text: str) -> list[PartitionFacts]:
    """Partitions from ``sinfo -h -o SINFO_FORMAT`` (one line per partition and node kind)."""
    found: dict[str, PartitionFacts] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 7:
            continue
        name, nodes, cpus, mem, gres, feats, limit = parts
        default = name.endswith("*")
        name = name.rstrip("*")
        p = found.setdefault(name, PartitionFacts(name))
        p.default = p.default or default
        p.nodes += int(nodes) if nodes.isdigit() else 0
        if cpus.rstrip("+").isdigit():
            p.cpus.append(int(cpus.rstrip("+")))
        if mem.rstrip("+").isdigit():
            p.memory_mb.append(int(mem.rstrip("+")))
        p.gpus.append(gpus_of(gres))
        p.features.update(f for f in feats.split(",") if f and f != "(null)")
        p.time_limit = limit
    return list(found.values())


def parse_probe(text: str) -> tuple[list[str], list[str]]:
    """(interfaces, InfiniBand devices) from the probe's output."""
    net, _, ib = text.partition("---")
    return net.split(), ib.split()


def probe(p: PartitionFacts, timeout: float = 120) -> None:
    try:
        out = _run(["srun", "-p", p.name, "-N1", "-n1", "-t", "2", "--job-name", "orch-detect",
                    "sh", "-c", PROBE], timeout)
    except NoSlurm as exc:
        p.probe_error = str(exc)
        return
    p.interfaces, p.ib_devices = parse_probe(out)


def minutes_of(limit: str) -> int | None:
    """A partition's MaxTime (``infinite``, ``30:00``, ``1-12``, ``1-00:00:00``) in minutes;
    None for no limit or a value that is not a Slurm time (``n/a``)."""
    try:
        return timelimit.minutes(limit)
    except ValueError:
        return None


def _pick_interface(p: PartitionFacts, loopback_nodes: bool) -> tuple[str, str]:
    """(socket_ifname, comment)."""
    if loopback_nodes:
        return "lo", ("guessed: every node's address is on loopback (nodes on this machine), "
                      "so ranks talk over lo")
    ifaces = [i for i in (p.interfaces or []) if i != "lo"]
    ib = [i for i in ifaces if i.startswith("ib")]
    if ib:
        return ib[0], f"guessed: IP over InfiniBand interface (node has {', '.join(ifaces)})"
    wired = [i for i in ifaces if re.match(r"(eth|en|eno|ens|enp|bond|hsn)", i)]
    if wired:
        return wired[0], f"guessed: first wired interface (node has {', '.join(ifaces)})"
    if ifaces:
        return ifaces[0], f"guessed: first interface other than lo ({', '.join(ifaces)})"
    why = p.probe_error or "the probe job listed no interface"
    return "lo", f"guessed, CHECK: {why}; lo works only if all ranks share one machine"


def render(name: str, parts: list[PartitionFacts], loopback: dict[str, bool]) -> str:
    """The draft as YAML text, a comment on every guessed value."""
    default = next((p.name for p in parts if p.default), parts[0].name if parts else None)
    lines = [
        "# Draft site config written by `orch site detect` from the live Slurm (sinfo, and a",
        "# probe job on one node of each partition). Values marked 'guessed' need a look.",
        f"name: {name}",
        f"description: detected from Slurm by orch site detect ({len(parts)} partition(s))",
        "scheduler: slurm",
        f"default_partition: {default}"
        + ("" if any(p.default for p in parts) else "  # guessed: Slurm marks no default"),
        "partitions:",
    ]
    for p in parts:
        ib = bool(p.ib_devices)
        ifname, why = _pick_interface(p, loopback.get(p.name, False))
        if p.interfaces is None:
            fabric_note = f"guessed, CHECK: the probe job did not run ({p.probe_error})"
        elif ib:
            fabric_note = f"probe: /sys/class/infiniband has {', '.join(p.ib_devices)}"
        else:
            fabric_note = "probe: no /sys/class/infiniband on the node"
        lines += [
            f"  - name: {p.name}",
            f"    interconnect: {'infiniband' if ib else 'ethernet'}  # {fabric_note}",
            f"    nodes: {p.nodes}",
            f"    cpus_per_node: {min(p.cpus) if p.cpus else 1}"
            + ("" if p.cpus else "  # guessed: sinfo gave no CPU count")
            + (f"  # the smallest of {sorted(set(p.cpus))}" if len(set(p.cpus)) > 1 else ""),
        ]
        gpus = min(p.gpus) if p.gpus else 0
        if gpus:
            lines.append(f"    gpus_per_node: {gpus}"
                         + (f"  # the smallest of {sorted(set(p.gpus))}"
                            if len(set(p.gpus)) > 1 else ""))
        if p.memory_mb and min(p.memory_mb) > 0:
            lines.append(f"    memory_per_node_gb: {round(min(p.memory_mb) / 1024, 1)}")
        lines.append(f"    socket_ifname: {ifname}  # {why}")
        if ib:
            lines.append(f"    ib_hca: [{', '.join(p.ib_devices)}]  # probe: all HCAs of the node")
        lines.append("    launcher: srun")
        limit = minutes_of(p.time_limit)
        job_min = 30 if limit is None else min(30, limit)
        lines += [
            "    sbatch:",
            f"      time: \"{job_min // 60:02d}:{job_min % 60:02d}:00\"  # guessed: a benchmark "
            f"job's limit; the partition allows {p.time_limit}",
        ]
        if p.features:
            lines.append(f"      # node features (use as constraint): "
                         f"{', '.join(sorted(p.features))}")
    lines += [
        "environments:",
        "  torch:  # guessed: the Python running orch, which the nodes must see (shared "
        "filesystem); add venv/modules/container otherwise",
        "    env:",
        "      OMP_NUM_THREADS: \"1\"  # guessed: one compute thread per rank",
    ]
    return "\n".join(lines) + "\n"


def detect(name: str, probe_jobs: bool = True) -> str:
    """The validated draft (YAML text); NoSlurm if Slurm is not reachable."""
    if shutil.which("sinfo") is None:
        raise NoSlurm("Slurm's sinfo is not installed here")
    parts = parse_sinfo(_run(["sinfo", "-h", "-o", SINFO_FORMAT], 60))
    if not parts:
        raise NoSlurm("sinfo lists no partition")
    from ..backends.slurm import SlurmScheduler

    sched = SlurmScheduler()
    loopback = {p.name: sched.nodes_on_loopback(p.name) for p in parts}
    for p in parts:
        if probe_jobs:
            probe(p)
        else:
            p.probe_error = "probe skipped"
    text = render(name, parts, loopback)
    validate(text)
    return text


def validate(text: str) -> None:
    """Raise UserError (file:line, field, fix) if the draft is not a valid site config."""
    from .. import site as sitemod

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "draft.yaml"
        path.write_text(text)
        try:
            sitemod.load(str(path))
        except UserError as exc:
            raise UserError(f"the detected draft is not a valid site config: {exc}") from None


def draft_path(name: str) -> Path:
    """Where a draft named ``name`` goes by default: the user's site directory, the first
    directory of the search path that is the user's own (``site.user_site_dir``)."""
    from .. import site as sitemod

    if not sitemod.valid_name(name):
        raise UserError(f"--name '{name}': a site name is letters, digits, '_', '.' and '-', "
                        f"starting with a letter or digit")
    return sitemod.user_site_dir() / f"{name}{sitemod.SUFFIX}"


def write_draft(path: Path, text: str, force: bool = False) -> None:
    """Write the draft to ``path`` whole (files: no reader sees half a draft); an existing
    file is replaced only with ``force``, and without it a file that appeared meanwhile is
    still not overwritten."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if force:
        write_text_atomic(path, text)
        return
    try:
        create_text_atomic(path, text)
    except FileExistsError:
        raise UserError(f"{path} exists; choose another --name or --out, or use --force to "
                        f"overwrite it") from None
