"""The network a prediction uses, and why: a partition's stored netbench α–β, a sweep's own
pre-flight (both levels), then the what-if overrides a user typed (``--bandwidth``,
``--latency``, ``--intra-bandwidth``, ``--intra-latency``).

Every function returns the network with a description of where it came from, which the
predictions print beside their numbers: a prediction is only as good as its inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import units
from ..errors import UserError
from ..perfmodel.comm import AlphaBeta, CommModel, Network
from . import netbench as nb
from . import preflight as pf


def comm_lookup(sweep: Path | None, explicit: Path | None) -> Callable[[str, str], CommModel]:
    """``(site, partition) -> CommModel``: netbench α–β (cached), or none and why."""
    cache: dict[tuple[str, str], CommModel] = {}

    def comm(site: str, partition: str) -> CommModel:
        if (site, partition) not in cache:
            result, source = nb.lookup(site, partition, sweep=sweep, explicit=explicit)
            ab = result.alpha_beta if result else None
            pre = pf.load_sweep(sweep).get(partition) if sweep and ab is None else None
            if pre is not None and pre.site == site:  # the sweep's own pre-flight, not circular
                ab, source = pre.inter.alpha_beta, (f"pre-flight of this sweep (inter-node, run "
                                                    f"{pre.inter.run_id})")
            cache[site, partition] = CommModel(ab, source)
        return cache[site, partition]

    return comm


def netbench_result(netbench_file: Path | None, site: str | None, partition: str | None,
                    sweep: Path | None) -> tuple[nb.NetbenchResult | None, str]:
    """(the netbench result, where it came from): ``--netbench FILE`` (a file, or a directory
    with --site and --partition), else the stored one of site and partition, else none."""
    result, source = None, "no netbench result given (--netbench FILE, or --site and --partition)"
    if netbench_file is not None:
        if not netbench_file.exists():
            raise UserError(f"--netbench {netbench_file}: no such file or directory")
        if netbench_file.is_dir() and not (site and partition):
            raise UserError(f"--netbench {netbench_file} is a directory: also give --site "
                            "and --partition to pick <site>-<partition>.json")
        result, source = nb.lookup(site or "", partition or "", explicit=netbench_file)
        if result is None:
            raise UserError(f"--netbench {netbench_file}: {source}")
    elif site and partition:
        result, source = nb.lookup(site, partition, sweep=sweep)
    return result, source


def alpha_beta_for(netbench_file: Path | None, site: str | None, partition: str | None,
                   sweep: Path | None, bandwidth: str | None, latency: str | None,
                   ) -> tuple[AlphaBeta | None, str]:
    """(AlphaBeta or None, description): netbench result, then the what-if overrides."""
    result, source = netbench_result(netbench_file, site, partition, sweep)
    alpha = result.alpha if result else None
    bandwidth_v = result.bandwidth if result else None
    what_if = []
    if bandwidth is not None:
        bandwidth_v = units.parse_bandwidth(bandwidth)
        what_if.append(f"B = {units.format_bandwidth(bandwidth_v)}")
    if latency is not None:
        alpha = units.parse_latency(latency)
        what_if.append(f"α = {units.format_seconds(alpha)}")
    if alpha is None and bandwidth_v is None:
        return None, source
    if alpha is None or bandwidth_v is None:
        missing = "--latency" if alpha is None else "--bandwidth"
        raise UserError(f"{missing} is needed too: there is no netbench result to take it from "
                        f"({source}); give both --bandwidth and --latency, or --netbench FILE")
    desc = source if result else "what-if"
    if what_if:
        desc = f"{desc}; what-if {', '.join(what_if)}" if result else "what-if " + ", ".join(
            what_if)
    return AlphaBeta(alpha=alpha, bandwidth=bandwidth_v), desc


def network_for(sweep: Path | None, partition: str | None, site: str | None,
                netbench_file: Path | None, bandwidth: str | None, latency: str | None,
                intra_bandwidth: str | None = None, intra_latency: str | None = None,
                mpi: bool = False) -> tuple[Network, str, pf.Preflight | None]:
    """(Network, description, the sweep's pre-flight or None): the sweep's pre-flight (both
    levels; ``mpi``, an MPI mode's: MPI's where it measured them), else a netbench result
    (inter-node only), then the what-ifs."""
    pre = pf.load_sweep(sweep).get(partition or "") if sweep is not None else None
    if pre is not None and netbench_file is None:
        inter_level, intra_level = pre.levels_of(mpi)
        inter, intra = inter_level.alpha_beta, intra_level.alpha_beta if intra_level else None
        desc = [f"pre-flight of {sweep}: {inter_level.describe()}"]
        if intra_level:
            desc.append(intra_level.describe())
    else:
        inter, src = alpha_beta_for(netbench_file, site, partition, sweep, bandwidth, latency)
        if inter is None:
            raise UserError("the two-level model needs an inter-node α–β: a result set with a "
                            "pre-flight, --netbench FILE, --site/--partition with a stored "
                            f"netbench, or --bandwidth and --latency ({src})")
        intra, desc = None, [f"inter: {src}"]
        bandwidth = latency = None  # already applied
    if bandwidth is not None or latency is not None:
        inter = AlphaBeta(alpha=units.parse_latency(latency) if latency else inter.alpha,
                          bandwidth=units.parse_bandwidth(bandwidth) if bandwidth
                          else inter.bandwidth)
        desc.append(f"what-if inter: α = {units.format_seconds(inter.alpha)}, B = "
                    f"{units.format_bandwidth(inter.bandwidth)}")
    if intra_bandwidth is not None or intra_latency is not None:
        base = intra or inter
        intra = AlphaBeta(
            alpha=units.parse_latency(intra_latency, "--intra-latency")
            if intra_latency else base.alpha,
            bandwidth=units.parse_bandwidth(intra_bandwidth, "--intra-bandwidth")
            if intra_bandwidth else base.bandwidth)
        desc.append(f"what-if intra: α = {units.format_seconds(intra.alpha)}, B = "
                    f"{units.format_bandwidth(intra.bandwidth)}")
    if intra is None:
        desc.append("intra: none measured, the inter-node α–β is used inside nodes too")
    return Network(inter=inter, intra=intra), "; ".join(desc), pre
