"""Fabric evidence a rank collects about itself: which interfaces its bytes really crossed.

Stdlib only, valid Python 3.6 (CNTK's), like the harness that calls it. Two snapshots, at the
start and the end of the measured window (outside every timed iteration), give:

* ``tcp``: this process's own established TCP connections (``/proc/self/fd`` socket inodes
  matched in ``/proc/net/tcp{,6}``), each local address mapped to the interface that holds it,
  and the payload bytes each connection sent and received in the window (the kernel's per-socket
  ``TCP_INFO`` counters ``tcpi_bytes_acked``/``tcpi_bytes_received``, read through a duplicate of
  the descriptor). This one mechanism sees Gloo, TensorFlow's gRPC, MXNet's ps-lite (ZeroMQ over
  TCP), Open MPI's TCP BTL, and Horovod, CNTK and ChainerMN over it. It is per process, so
  other jobs on the same host do not blur it.
* ``netdev`` / ``ib``: the host's interface counters (``/sys/class/net/*/statistics``) and
  InfiniBand port counters (``/sys/class/infiniband/*/ports/*/counters/port_{xmit,rcv}_data``,
  in 4-byte words, reported here in bytes) over the same window. These count every process of
  the kernel's network namespace: ``netns`` identifies it (boot id + namespace inode), so the
  control plane counts a namespace once even when several "nodes" share one kernel (the test
  cluster's four nodes do: their loopback counters hold every rank of the machine, and anyone
  else's traffic too).

A task that runs no iterations (a parameter server, a TensorFlow PS worker) records the same
from the harness' start to its footer (``basis: lifetime``; its sockets' counters since they
were opened).
"""

import fcntl
import os
import socket
import struct
import time

SCHEMA = 1
SIOCGIFADDR = 0x8915
# ARPHRD_* of /sys/class/net/<if>/type (linux/if_arp.h).
IF_TYPES = {1: "ethernet", 32: "infiniband", 772: "loopback"}
_TCP_ESTABLISHED = "01"
# struct tcp_info: tcpi_bytes_acked (u64) at 120, tcpi_bytes_received (u64) at 128 (Linux 4.1+).
_TCPI_BYTES = 120
_TCP_INFO = getattr(socket, "TCP_INFO", 11)


def _read(path, default=None):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return default


def _int(path):
    text = _read(path)
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def netns_id():
    """This kernel's boot id and this process's network namespace: equal for every process
    whose /sys/class/net counters are the same counters."""
    try:
        ino = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        ino = None
    return "{}:{}".format(_read("/proc/sys/kernel/random/boot_id", "?"), ino)


def _ipv4_of(name):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("256s", name.encode()[:15])
        return socket.inet_ntoa(fcntl.ioctl(sock.fileno(), SIOCGIFADDR, req)[20:24])
    except OSError:
        return None
    finally:
        sock.close()


def interfaces():
    """{name: {"type": ethernet|infiniband|loopback|<ARPHRD number>, "addrs": [...]}}."""
    out = {}
    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        names = []
    for name in names:
        kind = _int(f"/sys/class/net/{name}/type")
        addrs = []
        ip4 = _ipv4_of(name)
        if ip4:
            addrs.append(ip4)
        out[name] = {"type": IF_TYPES.get(kind, kind), "addrs": addrs}
    for line in (_read("/proc/net/if_inet6", "") or "").splitlines():
        f = line.split()
        if len(f) == 6 and f[5] in out:
            out[f[5]]["addrs"].append(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(f[0])))
    return out


def iface_of(addr, ifaces):
    """The interface holding a local address (all of 127/8 and ::1 are the loopback's)."""
    if addr.startswith("::ffff:"):
        addr = addr[7:]
    for name, facts in ifaces.items():
        if addr in facts["addrs"]:
            return name
    if addr.startswith("127.") or addr == "::1":
        for name, facts in ifaces.items():
            if facts["type"] == "loopback":
                return name
        return "lo"
    return None


def netdev_counters():
    out = {}
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return out
    for name in names:
        base = f"/sys/class/net/{name}/statistics/"
        tx, rx = _int(base + "tx_bytes"), _int(base + "rx_bytes")
        if tx is not None and rx is not None:
            out[name] = (tx, rx)
    return out


def ib_counters():
    """{"<hca>/<port>": (xmit bytes, rcv bytes)}; the counters count 4-byte words."""
    out = {}
    root = "/sys/class/infiniband"
    try:
        hcas = os.listdir(root)
    except OSError:
        return out
    for hca in hcas:
        try:
            ports = os.listdir(os.path.join(root, hca, "ports"))
        except OSError:
            continue
        for port in ports:
            base = os.path.join(root, hca, "ports", port, "counters")
            tx = _int(os.path.join(base, "port_xmit_data"))
            rx = _int(os.path.join(base, "port_rcv_data"))
            if tx is not None and rx is not None:
                out[f"{hca}/{port}"] = (4 * tx, 4 * rx)
    return out


def _hex_addr(text):
    addr, port = text.split(":")
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, struct.pack("<I", struct.unpack(">I", raw)[0]))
    else:
        words = struct.unpack(">4I", raw)
        ip = socket.inet_ntop(socket.AF_INET6, struct.pack("<4I", *words))
    return ip, int(port, 16)


def parse_proc_net_tcp(text):
    """Established connections of a /proc/net/tcp{,6} text: [(inode, local, remote)], each
    address as (ip, port)."""
    out = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or f[3] != _TCP_ESTABLISHED:
            continue
        try:
            out.append((int(f[9]), _hex_addr(f[1]), _hex_addr(f[2])))
        except (ValueError, struct.error):
            continue
    return out


def own_sockets():
    """{inode: fd} of this process's sockets."""
    out = {}
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(fd)
    return out


def _tcp_bytes(fd, family):
    """(sent and acknowledged, received) payload bytes of a connected TCP socket, or None."""
    try:
        dup = socket.fromfd(fd, family, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        raw = dup.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 256)
    except OSError:
        return None
    finally:
        dup.close()  # closes the duplicate only
    if len(raw) < _TCPI_BYTES + 16:
        return None
    acked, received = struct.unpack_from("<QQ", raw, _TCPI_BYTES)
    return max(0, acked - 1), received  # the SYN counts as one acknowledged byte


def connections():
    """{inode: (local ip, remote ip, sent, received)} of this process's TCP connections."""
    mine = own_sockets()
    out = {}
    for path, family in (("/proc/self/net/tcp", socket.AF_INET),
                         ("/proc/self/net/tcp6", socket.AF_INET6)):
        for inode, local, remote in parse_proc_net_tcp(_read(path, "") or ""):
            fd = mine.get(inode)
            if fd is None:
                continue
            counts = _tcp_bytes(fd, family)
            if counts is not None:
                out[inode] = (local[0], remote[0], counts[0], counts[1])
    return out


class Snapshot:
    """Counters at one instant (cheap: a few hundred small file reads at most)."""

    def __init__(self, with_sockets=True):
        self.time = time.time()
        self.netdev = netdev_counters()
        self.ib = ib_counters()
        self.conns = connections() if with_sockets else {}


def record(start, end, basis="window"):
    """The footer's ``fabric`` object: what crossed which interface between two snapshots.

    ``tcp``: one entry per (interface, its type), over this process's connections: ``tx``/``rx``
    payload bytes, ``conns`` connections, ``peers`` remote addresses. A connection opened in
    the window counts from zero; one closed before its end is not seen.
    """
    ifaces = interfaces()
    local_addrs = set(a for f in ifaces.values() for a in f["addrs"])
    tcp = {}
    for inode, (lip, rip, sent, recv) in end.conns.items():
        before = start.conns.get(inode)
        tx = sent - before[2] if before else sent
        rx = recv - before[3] if before else recv
        name = iface_of(lip, ifaces) or "?"
        entry = tcp.setdefault(name, {"iface": name,
                                      "type": ifaces.get(name, {}).get("type"),
                                      "tx": 0, "rx": 0, "conns": 0, "peers": set(),
                                      "host_local": 0})
        entry["tx"] += max(0, tx)
        entry["rx"] += max(0, rx)
        entry["conns"] += 1
        entry["peers"].add(rip)
        if rip in local_addrs or rip.startswith("127."):
            entry["host_local"] += 1  # routed inside this kernel, whatever the address
    for entry in tcp.values():
        entry["peers"] = sorted(entry["peers"])

    def delta(a, b):
        return {k: {"tx": b[k][0] - a[k][0], "rx": b[k][1] - a[k][1]} for k in b if k in a}

    return {
        "schema": SCHEMA, "basis": basis, "seconds": end.time - start.time,
        "host": socket.gethostname(), "netns": netns_id(),
        "tcp": sorted(tcp.values(), key=lambda e: -(e["tx"] + e["rx"])),
        "netdev": delta(start.netdev, end.netdev),
        "ifaces": {k: v["type"] for k, v in ifaces.items()},
        "ib": delta(start.ib, end.ib),
    }


def safe(fn, *args, **kwargs):
    """Evidence is best effort: never let it fail a rank. Returns None on any error."""
    try:
        return fn(*args, **kwargs)
    except Exception:
        return None
