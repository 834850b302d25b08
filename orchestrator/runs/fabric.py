"""Fabric attestation: which transport and interface a run's ranks really used, and whether
the bytes that crossed it are the bytes its communication pattern must move.

Evidence (gathered per rank, never trusted from configuration):

* the footer's ``fabric`` object (``rankside.fabric``): each rank's own TCP connections mapped
  to interfaces with their payload bytes over the measured window (Gloo, gRPC, ps-lite, Open
  MPI's TCP BTL and what runs over it), and the host's interface / InfiniBand port counters;
* the rank's output (``ranks/rank-<k>.out``): NCCL's INIT/NET lines (``NET/IB : Using
  [0]mlx5_0:1/IB``, ``NET/Socket : Using [0]eth0:...``, ``Using network IB``), UCX's
  ``UCX_LOG_LEVEL=info`` transport lines (``ep_cfg[2]: tag(... rc_mlx5/mlx5_0:1)``) and Open
  MPI's ``pml_base_verbose`` / ``btl_base_verbose`` selection lines, when present.

What was declared comes from the run's provenance (the partition's ``interconnect``,
``socket_ifname`` and ``ib_hca`` as the site said when the run was prepared).

The verdict, per run:

* ``verified``: the data transport matches the declaration (InfiniBand: NCCL's or UCX's verbs
  transport on an HCA, or TCP over an IPoIB interface; Ethernet: TCP or NCCL sockets on the
  declared interface) and at least :data:`MIN_RATIO` of the bytes the pattern must move were
  seen on it — by the ranks' sockets and, where the nodes' interface counters were read, by
  that interface's counters too;
* ``mismatch``: the bytes went over something else than declared (a loopback or an Ethernet
  device where InfiniBand is declared, another NIC than the declared one);
* ``unverified``: no evidence (one node, no rank recorded any, too few bytes to tell, or the
  interface's counters contradict the sockets).

A partition that *emulates* its fabric says so (``emulated_by``: the test cluster's ``ib``
partition is a veth shaped by tc, named ``ib0``): its interface's device type is not checked,
and the verdict says what it is — sockets over an emulated IPoIB link, not InfiniBand verbs.
The busiest other interface's counter (``fabric_other_bytes``) is reported beside, never
judged: on a real node it carries storage, Slurm and other jobs' traffic too.

Expected bytes are what the training ranks must SEND in the measured window, from the model's
float32 gradient ``G`` and the training ranks ``N``: ring all-reduce ``2(N-1)/N * G`` per rank
and iteration; parameter server: every worker pushes ``G`` per iteration (and pulls as much);
FSDP: two all-gathers of the parameters (forward, backward) and one reduce-scatter of the
gradient, ``(N-1)/N * G`` each (one all-gather with ``reshard_after_forward=no``).
Measured bytes are the training ranks' TCP payload sent in the window (or, for a task with no
window of its own, such as a TensorFlow PS worker, since it started: compared against every
iteration, warm-up included, ``basis: lifetime``); over verbs, the HCA port counters.
"""

from __future__ import annotations

import re
from pathlib import Path

from .. import modes, protocol, zoo
from ..protocol import RankLog
from . import provenance

VERIFIED, MISMATCH, UNVERIFIED = "verified", "mismatch", "unverified"
# A verified run's data interface carried at least this share of the expected bytes.
MIN_RATIO = 0.5
# An interface is a data interface when it carried at least this share of the TCP bytes.
DATA_SHARE = 0.1
COLUMNS = ("fabric", "fabric_reason", "fabric_transport", "fabric_iface",
           "fabric_bytes_measured", "fabric_bytes_expected", "fabric_host_bytes",
           "fabric_other_bytes")
OUT_TAIL_BYTES = 4 << 20  # NCCL/UCX/Open MPI print at start-up: the head of a big file is enough

# A run directory holding this file was swept with --require-fabric: a mismatch fails it.
REQUIRE_FILE = "require-fabric"


def set_required(rdir: Path, required: bool) -> None:
    path = Path(rdir) / REQUIRE_FILE
    if required:
        path.write_text("a fabric mismatch fails this run (orch sweep --require-fabric)\n")
    elif path.exists():
        path.unlink()


def is_required(rdir: Path) -> bool:
    return (Path(rdir) / REQUIRE_FILE).exists()


# --- parsers of the ranks' output ---------------------------------------------------------

_NCCL_NETWORK = re.compile(r"NCCL INFO Using network (\S+(?: \S+)*?)\s*$")
_NCCL_IB = re.compile(r"NCCL INFO NET/IB : Using (.*?)(?:; OOB (\S+?):.*)?$")
_NCCL_IB_DEV = re.compile(r"\[\d+\]([\w.-]+):(\d+)/(IB|RoCE)")
_NCCL_SOCKET = re.compile(r"NCCL INFO NET/Socket : Using (.*)$")
_NCCL_SOCKET_DEV = re.compile(r"\[\d+\]([\w.-]+):")
_NCCL_CHANNEL = re.compile(r"via NET/(IB|Socket)/\d+")
_UCX_EP = re.compile(r"UCX\s+INFO\s+ep_cfg\[\d+\]: \w+\((.*?)\)")
_OMPI_PML = re.compile(r"select: component (\w+) selected")
_OMPI_BML = re.compile(r"bml: Using (\w+) btl for send to \[\[\d+,\d+\],\d+\] on node (\S+)")
# UCX transports that stay inside one host, and those that are verbs (InfiniBand/RoCE).
_UCX_LOCAL = ("self", "sysv", "posix", "cma", "knem", "xpmem", "cuda_copy", "cuda_ipc",
              "gdr_copy", "rocm_copy", "rocm_ipc")
_UCX_VERBS = ("rc", "rc_verbs", "rc_mlx5", "dc", "dc_mlx5", "ud", "ud_verbs", "ud_mlx5")


def parse_nccl(text: str) -> dict | None:
    """NCCL's choice from its INFO lines: ``{"network": "IB"|"Socket"|..., "hcas": [...],
    "ifaces": [...], "ib_missing": bool}``; None when NCCL said nothing.

    ``Using network X`` (NCCL >= 2.5) decides; before it, a channel ``via NET/X/0``; else the
    IB module listing devices (NCCL 2.4 lists the Socket module's interface first for its
    bootstrap, then IB's devices, and uses IB)."""
    network = None
    hcas: list[str] = []
    ifaces: list[str] = []
    missing = channel = False
    for line in text.splitlines():
        if "NCCL" not in line:
            continue
        m = _NCCL_NETWORK.search(line)
        if m:
            network = m.group(1)
            continue
        m = _NCCL_IB.search(line)
        if m:
            for dev, port, _ in _NCCL_IB_DEV.findall(m.group(1)):
                if f"{dev}:{port}" not in hcas:
                    hcas.append(f"{dev}:{port}")
            continue
        m = _NCCL_SOCKET.search(line)
        if m:
            for dev in _NCCL_SOCKET_DEV.findall(m.group(1)):
                if dev not in ifaces:
                    ifaces.append(dev)
            continue
        if "NET/IB : No device found" in line:
            missing = True
        m = _NCCL_CHANNEL.search(line)
        if m and network is None:
            network, channel = m.group(1), True
    if network is None and not channel:
        network = "IB" if hcas else "Socket" if ifaces else None
    if network is None and not missing:
        return None
    return {"network": network, "hcas": hcas, "ifaces": ifaces, "ib_missing": missing}


def parse_ucx(text: str) -> dict | None:
    """UCX's endpoint transports (``UCX_LOG_LEVEL=info``): ``{"verbs": [dev:port ...],
    "tcp": [iface ...], "local": [...]}``; None without such lines."""
    verbs: list[str] = []
    tcp: list[str] = []
    local: list[str] = []
    found = False
    for m in _UCX_EP.finditer(text):
        found = True
        for item in m.group(1).split():
            tl, _, dev = item.partition("/")
            bucket = verbs if tl in _UCX_VERBS else tcp if tl == "tcp" else local
            name = dev if bucket is not local else tl
            if name not in bucket:
                bucket.append(name)
    return {"verbs": verbs, "tcp": tcp, "local": local} if found else None


def parse_ompi(text: str) -> dict | None:
    """Open MPI's selection (``pml_base_verbose``, ``btl_base_verbose``): ``{"pml": name,
    "btls": [btl used to reach another process, other than self]}``; None without them."""
    pml = None
    btls: list[str] = []
    for line in text.splitlines():
        m = _OMPI_PML.search(line)
        if m:
            pml = m.group(1)
            continue
        m = _OMPI_BML.search(line)
        if m and m.group(1) != "self" and m.group(1) not in btls:
            btls.append(m.group(1))
    if pml is None and not btls:
        return None
    return {"pml": pml, "btls": btls}


def read_out(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read(OUT_TAIL_BYTES).decode(errors="replace")
    except OSError:
        return ""


# --- expected bytes ------------------------------------------------------------------------

def gradient_bytes(model: str, dataset: str, params: int | None = None) -> int | None:
    """float32 gradient bytes: a user's model's counted ``params``, else the zoo's."""
    if params is not None:
        return 4 * params
    try:
        return 4 * zoo.get(model).params(dataset)
    except Exception:
        return None


def expected_sent_per_rank(pattern: str, ranks: int, grad: int, options: dict) -> float | None:
    """Bytes one training rank must send per iteration for the pattern (see module doc)."""
    if ranks < 2 or not grad:
        return 0.0 if ranks < 2 else None
    share = (ranks - 1) / ranks
    if pattern == "allreduce":
        return 2 * share * grad
    if pattern == "parameter-server":
        return float(grad)
    if pattern == "allgather-reducescatter":
        gathers = 1 if options.get("reshard_after_forward") == "no" else 2
        return (gathers + 1) * share * grad
    return None


# --- the verdict ---------------------------------------------------------------------------

def declared(rdir: Path, run) -> dict:
    """What the partition declared, from the run's provenance (the site when it was prepared)."""
    prov = provenance.read(rdir) or {}
    parts = (((prov.get("site") or {}).get("config") or {}).get("partitions")) or []
    part = next((p for p in parts if p.get("name") == run.partition), {})
    return {"interconnect": part.get("interconnect", run.interconnect),
            "socket_ifname": part.get("socket_ifname"), "ib_hca": part.get("ib_hca") or [],
            "emulated_by": part.get("emulated_by")}


def _result(verdict, reason, transport=None, iface=None, measured=None, expected=None,
            host=None, other=None) -> dict:
    return dict(zip(COLUMNS, (verdict, reason, transport, iface, measured, expected, host,
                              other), strict=True))


def _count(value) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool)
                             and value >= 0)


def _counters(table) -> dict:
    """{name: {"tx", "rx"}} byte counters, those of that shape only."""
    if not isinstance(table, dict):
        return {}
    return {name: v for name, v in table.items() if isinstance(v, dict)
            and _count(v.get("tx")) and _count(v.get("rx"))}


def evidence(log: RankLog) -> dict:
    """A rank's fabric evidence (its footer's ``fabric``), with only the parts of the shape
    rankside.fabric.record writes: what a damaged log holds of another shape is left out,
    never a crash."""
    fab = (log.footer or {}).get(protocol.FABRIC)
    if not isinstance(fab, dict):
        return {}
    out: dict = {k: fab[k] for k in ("basis", "netns", "host") if isinstance(fab.get(k), str)}
    tcp = fab.get("tcp")
    out["tcp"] = [e for e in tcp if isinstance(e, dict) and _count(e.get("tx"))
                  and _count(e.get("rx")) and all(isinstance(e.get(k), str | None)
                                                  for k in ("iface", "type"))] \
        if isinstance(tcp, list) else []
    out["netdev"], out["ib"] = _counters(fab.get("netdev")), _counters(fab.get("ib"))
    return {k: v for k, v in out.items() if v}


def _tcp_evidence(logs: list[RankLog], train: set[int]) -> tuple[dict, dict, dict]:
    """Per interface: (type, TCP bytes of all tasks), training ranks' sent bytes per basis."""
    types: dict[str, str] = {}
    total: dict[str, int] = {}
    sent: dict[str, dict[str, int]] = {"window": {}, "lifetime": {}}
    for log in logs:
        fab = evidence(log)
        for entry in fab.get("tcp") or []:
            name = entry.get("iface") or "?"
            types[name] = entry.get("type")
            total[name] = total.get(name, 0) + int(entry.get("tx") or 0) + int(entry.get("rx")
                                                                               or 0)
            if log.rank in train and fab.get("basis") in sent:
                per = sent[fab["basis"]]
                per[name] = per.get(name, 0) + int(entry.get("tx") or 0)
    return types, total, sent


def host_counters(logs: list[RankLog], train: set[int]) -> dict[str, int]:
    """Bytes each interface sent over the window by its host counters, summed over network
    namespaces, each counted once (the lowest training rank's window in each): nodes that are
    hosts of their own each count theirs; several "nodes" sharing one kernel count once."""
    seen: dict[str, dict] = {}
    for log in sorted(logs, key=lambda lg: lg.rank):
        fab = evidence(log)
        if log.rank not in train or fab.get("basis") != "window":
            continue
        ns = fab.get("netns") or fab.get("host")
        if ns not in seen and fab.get("netdev"):
            seen[ns] = fab["netdev"]
    out: dict[str, int] = {}
    for netdev in seen.values():
        for name, dev in netdev.items():
            out[name] = out.get(name, 0) + int((dev or {}).get("tx") or 0)
    return out


def _other_iface(counters: dict[str, int], used: list[str], types: dict) -> tuple[str, int]:
    """The busiest interface that is neither used nor a loopback: ("", 0) if none moved."""
    others = [(b, n) for n, b in counters.items()
              if n not in used and types.get(n) != "loopback" and n != "lo"]
    if not others:
        return "", 0
    busiest, name = max(others)
    return name, busiest


def _verbs_verdict(nccl: list[dict], ucx: list[dict], decl: dict, ib_bytes: int | None,
                   expected: float | None) -> dict | None:
    """The verdict where the ranks used verbs (NCCL IB, UCX rc/dc/ud), its bytes from the HCA
    port counters; None where no rank did."""
    verbs = sorted({h for p in nccl if p["network"] == "IB" for h in p["hcas"]}
                   | {d for p in ucx for d in p["verbs"]})
    if not verbs:
        return None
    used = ",".join(verbs)
    transport = "nccl-ib" if any(p["network"] == "IB" for p in nccl) else "ucx-verbs"
    hcas = {h.split(":")[0] for h in decl["ib_hca"]}
    if decl["interconnect"] != "infiniband":
        return _result(MISMATCH, f"declared {decl['interconnect']} on {decl['socket_ifname']}; "
                       f"ranks used verbs ({transport}) on {used}", transport, used, ib_bytes,
                       expected)
    if hcas and not {v.split(":")[0] for v in verbs} <= hcas:
        return _result(MISMATCH, f"declared HCAs {','.join(sorted(hcas))}; ranks used "
                       f"{used}", transport, used, ib_bytes, expected)
    return _bytes_verdict("InfiniBand verbs", (transport, used, ib_bytes, expected, None, None))


def _transport_note(nccl: list[dict], ompi: list[dict]) -> str:
    """What the transports' own lines said that a socket verdict quotes: " (...)" or ""."""
    notes = []
    if any(p["ib_missing"] for p in nccl):
        notes.append("NCCL: 'NET/IB : No device found'")
    if any(p["pml"] for p in ompi):
        notes.append("Open MPI pml " + ",".join(sorted({p["pml"] for p in ompi if p["pml"]})))
    if any(p["btls"] for p in ompi):
        notes.append("btl " + ",".join(sorted({b for p in ompi for b in p["btls"]})))
    return f" ({'; '.join(notes)})" if notes else ""


def attest(run, rdir: Path, logs: list[RankLog]) -> dict:
    """The run's fabric verdict and its figures (:data:`COLUMNS`)."""
    decl = declared(rdir, run)
    mode = modes.get(run.mode)
    tasks = run.tasks()
    train = {k for k, t in enumerate(tasks) if t.role in mode.training_roles}
    if run.nodes < 2:
        return _result(UNVERIFIED, "one node: nothing crosses the fabric")
    pattern_grad = None if not mode.trains else gradient_bytes(run.model, run.dataset,
                                                                   run.model_params)
    per_rank = (expected_sent_per_rank(mode.pattern, len(train), pattern_grad, run.options)
                if pattern_grad else None)

    outs = [read_out(rdir / protocol.RANKS_DIR / protocol.rank_out_name(k))
            for k in range(len(tasks))]
    nccl = [p for p in map(parse_nccl, outs) if p]
    ucx = [p for p in map(parse_ucx, outs) if p]
    ompi = [p for p in map(parse_ompi, outs) if p]
    types, total, sent = _tcp_evidence(logs, train)
    want_ib = decl["interconnect"] == "infiniband"
    nic = decl["socket_ifname"]
    iters = run.iters

    # 1. Verbs transports (NCCL IB, UCX rc/dc/ud): bytes from the HCA port counters.
    expected = per_rank * len(train) * iters if per_rank is not None else None
    verdict = _verbs_verdict(nccl, ucx, decl, _ib_bytes(logs, train), expected)
    if verdict is not None:
        return verdict

    # 2. Socket transports: NCCL's socket module, UCX/Open MPI TCP, everything else's TCP.
    nccl_socket = sorted({i for p in nccl if p["network"] == "Socket" for i in p["ifaces"]})
    grand = sum(total.values())
    data_ifaces = sorted(i for i, b in total.items() if grand and b >= DATA_SHARE * grand)
    used_ifaces = sorted(set(data_ifaces) | set(nccl_socket)
                         | {t for p in ucx for t in p["tcp"]})
    note = _transport_note(nccl, ompi)
    if not used_ifaces:
        if not any(evidence(lg) for lg in logs):
            return _result(UNVERIFIED, "no rank recorded fabric evidence" + note)
        return _result(UNVERIFIED, "no rank's bytes crossed a network interface it could see "
                       "(shared memory, or a transport orch cannot observe)" + note)
    basis = "window" if sent["window"] else "lifetime"
    measured = sum(sent[basis].get(i, 0) for i in used_ifaces)
    count = iters if basis == "window" else iters + run.warmup
    expected = per_rank * len(train) * count if per_rank is not None else None
    transport = "nccl-socket" if nccl_socket else "tcp"
    used = ",".join(used_ifaces)
    kinds = ",".join(sorted({str(types.get(i) or "?") for i in used_ifaces}))
    counters = host_counters(logs, train)
    host = sum(counters[i] for i in used_ifaces if i in counters) if counters else None
    other_name, other = _other_iface(counters, used_ifaces, types)
    figures = (transport, used, measured, expected, host, other if counters else None)
    emulated = decl.get("emulated_by")
    if want_ib and not emulated:
        ipoib = all(types.get(i) == "infiniband" for i in used_ifaces)
        if not ipoib:
            return _result(MISMATCH, f"declared infiniband; ranks used {transport.upper()} "
                           f"over {used} ({kinds}), not an InfiniBand device" + note, *figures)
        what = "TCP over IPoIB"
    elif nic and set(used_ifaces) != {nic}:
        return _result(MISMATCH, f"declared {decl['interconnect']} on {nic}; ranks used "
                       f"{transport.upper()} over {used} ({kinds})" + note, *figures)
    elif want_ib:
        what = (f"{transport.upper()} over {used}, an emulated IPoIB link ({emulated}): "
                "sockets, not InfiniBand verbs")
    else:
        what = f"{transport.upper()} over {used} ({kinds})"
        if emulated:
            what += f", an emulated link ({emulated})"
    return _bytes_verdict(what, figures, basis, note, other_name)


def _bytes_verdict(what: str, figures: tuple, basis: str = "window", note: str = "",
                   other_name: str = "") -> dict:
    """The verdict on the bytes: the training ranks' sockets sent at least MIN_RATIO of what
    the pattern must send, over the interface, and (where the nodes' interface counters were
    read) that interface's counters moved at least as much, whatever the other interfaces
    did (they carry the nodes' other traffic too: storage, Slurm, other jobs)."""
    _, used, measured, expected, host, other = figures
    where = "" if basis == "window" else " (since the tasks started)"
    if expected is None:
        return _result(VERIFIED, f"{what}; no expected byte count for this mode{note}", *figures)
    if measured is None:
        return _result(UNVERIFIED, f"{what}, but no byte counters were read{note}", *figures)
    ratio = measured / expected if expected else float("inf")
    if expected and ratio < MIN_RATIO:
        return _result(UNVERIFIED, f"{what}, but only {measured:,} of the {expected:,.0f} bytes "
                       f"the pattern must send crossed it{where}{note}", *figures)
    counted = ""
    if host is not None and basis == "window":
        if expected and host < MIN_RATIO * expected:
            return _result(UNVERIFIED, f"{what}; the ranks' sockets sent {measured:,} bytes, "
                           f"but the nodes' counters of {used} moved only {host:,} of the "
                           f"{expected:,.0f} the pattern must send{note}", *figures)
        counted = f"; the nodes' counters: {used} {host:,}"
        if other_name:
            counted += f", {other_name} {other:,}"
    return _result(VERIFIED, f"{what}; {measured:,} bytes sent{where}, "
                   f"{ratio:.2f}x the {expected:,.0f} expected{counted}{note}", *figures)


def _ib_bytes(logs: list[RankLog], train: set[int]) -> int | None:
    seen: dict[str, int] = {}
    for log in logs:
        fab = evidence(log)
        if log.rank in train and fab.get("basis") == "window" and fab.get("ib"):
            ns = fab.get("netns") or fab.get("host")
            seen.setdefault(ns, sum(int(v.get("tx", 0)) for v in fab["ib"].values()))
    return sum(seen.values()) if seen else None
