"""Hang detection: a running job whose ranks stop making progress, read from the control plane.

While a sweep waits, each running run is watched through the files its ranks write anyway
(``ranks/rank-<k>.jsonl``: one ``iter`` record per iteration) and their heartbeats
(``ranks/rank-<k>.beat``, protocol.HEARTBEAT_S). Nothing is asked of the nodes, and every time
is taken by orch's own clock when it *sees* a change, so node clocks never matter.

A run is hung when no rank of a logging role has logged a new iteration for the hang timeout
(``--hang-timeout``, at least 10x the run's median iteration time so far), or, before the first
iteration, for the start-up timeout (imports, rendezvous, container start). A run whose logging
ranks have all written their footer is never hung (it is ending).

Which ranks stalled: those whose heartbeat stopped (a stopped process, a dead node) while the
others still beat (alive, waiting in a collective); without that evidence, the ranks behind the
others; else all. The reason names each rank, its node and the last iteration it reached.

A rank's heartbeat also says when its fabric interface is down on its node (the link of its
collectives: the partition's socket_ifname). A run with such a rank and no iteration progress
for :data:`LINK_DOWN_S` is hung at once, without waiting for the hang timeout, and the reason
names the node and the interface: that node is the one to blame (a retry keeps off it).
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .. import modes, protocol
from ..spec.api import Run

HANG_TIMEOUT_S = 300.0
STARTUP_TIMEOUT_S = 900.0
MEDIAN_FACTOR = 10.0
# A heartbeat unchanged this long: the process does not run (stopped, or its node is gone).
FROZEN_S = max(5.0, 5 * protocol.HEARTBEAT_S)
# A log first seen when already big (orch restarted mid-run): its header and last bytes only.
TAIL_BYTES = 1 << 16
# A rank's link down this long, with no iteration progress meanwhile: the run is hung (a link
# that comes back sooner, as a flap does, only delays it).
LINK_DOWN_S = 15.0


@dataclass(frozen=True)
class HangPolicy:
    """``timeout_s``: no new iteration for this long (or 10x the median iteration, if longer)
    is a hang; 0 turns the watch off. ``startup_s``: the same before the first iteration."""

    timeout_s: float = HANG_TIMEOUT_S
    startup_s: float = STARTUP_TIMEOUT_S

    @property
    def enabled(self) -> bool:
        return self.timeout_s > 0

    def limit(self, median_s: float | None) -> float:
        return max(self.timeout_s, MEDIAN_FACTOR * median_s) if median_s else self.timeout_s


@dataclass(frozen=True)
class Hang:
    """A hung run: why (the reason recorded with state HUNG) and the nodes to blame."""

    reason: str
    nodes: list[str] = field(default_factory=list)


class _RankTail:
    """One rank log, read a little more at every look: header, last iteration, footer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.header: dict | None = None
        self.last_iter: int | None = None
        self.count = 0
        self.footer = False
        self.t_iters: deque[float] = deque(maxlen=512)

    def read(self) -> bool:
        """Read what was appended; True when new iteration records came."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return False
        if size < self.offset:  # replaced or truncated: start over
            self.__init__(self.path)
        if size == self.offset:
            return False
        before = self.count
        try:
            with open(self.path, "rb") as fh:
                if self.offset == 0 and size > 2 * TAIL_BYTES:
                    self._line(fh.readline())
                    fh.seek(size - TAIL_BYTES)
                    fh.readline()  # the rest of a line cut in the middle
                    self.partial = b""
                else:
                    fh.seek(self.offset)
                data = fh.read(size - fh.tell())
        except OSError:
            return False
        self.offset = size
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            self._line(line)
        return self.count > before

    def _line(self, line: bytes) -> None:
        if not line.strip():
            return
        rec = protocol.parse_record(line)
        if rec is None:
            return
        if rec["type"] == protocol.HEADER:
            self.header = rec
        elif rec["type"] == protocol.FOOTER:
            self.footer = True
        elif rec["type"] == protocol.ITER:
            self.count += 1
            self.last_iter = rec["iter"]
            self.t_iters.append(float(rec["t_iter"]))
        else:  # an epoch record (--epochs): progress too, after its epoch's iterations
            self.count += 1


class RunWatch:
    """One running run's progress, as orch sees it (``now``: orch's monotonic clock)."""

    def __init__(self, run: Run, rdir: Path, policy: HangPolicy, now: float) -> None:
        self.run, self.rdir, self.policy = run, rdir, policy
        self.tasks = run.tasks()
        roles = modes.get(run.mode).logging_roles
        self.logging = [k for k, t in enumerate(self.tasks) if t.role in roles]
        self.since = now  # running (again) since: the start-up clock
        self.progress_at: float | None = None
        ranks = rdir / protocol.RANKS_DIR
        self.tails = {k: _RankTail(ranks / protocol.rank_log_name(k))
                      for k in range(len(self.tasks))}
        self.beats: dict[int, tuple[bytes, float]] = {}
        # Per rank: the interfaces its last heartbeat said are down, and since when (orch's
        # clock, when first seen down).
        self.down: dict[int, tuple[tuple[str, ...], float]] = {}

    def pause(self, now: float) -> None:
        """The job is held still on purpose (suspended): its clocks start again."""
        self.since = now
        if self.progress_at is not None:
            self.progress_at = now
        self.beats = {k: (b, now) for k, (b, _) in self.beats.items()}

    def observe(self, now: float, nodes: list[str] | None = None) -> Hang | None:
        """Read what the ranks wrote since the last look; a Hang once the run is hung."""
        for k, tail in self.tails.items():
            if tail.read() and k in self.logging:
                self.progress_at = now
        for k in self.tails:
            self._beat(k, now)
        if not self.policy.enabled or not self.logging:
            return None
        if all(self.tails[k].footer for k in self.logging):
            return None
        cut = self._link_cut(now)
        if cut is not None:
            return self._hang(cut, now, nodes or [])
        if self.progress_at is None:
            if now - self.since <= self.policy.startup_s:
                return None
            what = (f"no first iteration within the start-up timeout of "
                    f"{self.policy.startup_s:.0f} s")
        else:
            times = [t for k in self.logging for t in self.tails[k].t_iters]
            limit = self.policy.limit(statistics.median(times) if times else None)
            if now - self.progress_at <= limit:
                return None
            what = (f"no iteration progress for {now - self.progress_at:.0f} s "
                    f"(hang timeout {limit:.0f} s)")
        return self._hang(what, now, nodes or [])

    def _beat(self, k: int, now: float) -> None:
        path = self.rdir / protocol.RANKS_DIR / protocol.heartbeat_name(k)
        try:
            with open(path, "rb") as fh:
                content = fh.read(protocol.HEARTBEAT_BYTES)
        except OSError:
            return
        if content and self.beats.get(k, (None, 0.0))[0] != content:
            self.beats[k] = (content, now)
            down = tuple(protocol.heartbeat_links_down(content))
            if not down:
                self.down.pop(k, None)
            elif self.down.get(k, ((), 0.0))[0] != down:
                self.down[k] = (down, now)

    def _link_cut(self, now: float) -> str | None:
        """Why the run is hung now that a rank's link has been down for LINK_DOWN_S with no
        iteration progress since it went down; None otherwise."""
        for k, (ifaces, since) in sorted(self.down.items()):
            if self.tails[k].footer or now - since < LINK_DOWN_S:
                continue
            if self.progress_at is not None and self.progress_at > since:
                continue
            return (f"{','.join(ifaces)} down on {self._node_of(k, [])} for {now - since:.0f} s "
                    f"(rank {k}'s heartbeat), no iteration progress since")
        return None

    def _node_of(self, k: int, nodes: list[str]) -> str:
        header = self.tails[k].header or {}
        if header.get("node") or header.get("host"):
            return str(header.get("node") or header.get("host"))
        idx = self.tasks[k].node
        return nodes[idx] if 0 <= idx < len(nodes) else "?"

    def _hang(self, what: str, now: float, nodes: list[str]) -> Hang:
        def node_of(k: int) -> str:
            return self._node_of(k, nodes)

        alive = [k for k in self.tails if not self.tails[k].footer]
        frozen = [k for k in alive if k in self.beats and now - self.beats[k][1] >= FROZEN_S]
        beating = [k for k in alive if k in self.beats and k not in frozen]
        cut = [k for k in alive if k in self.down]
        if cut:
            stalled = cut
        elif frozen and beating:
            stalled = frozen
        else:
            lasts = {k: self.tails[k].last_iter for k in self.logging if k in alive}
            known = [v for v in lasts.values() if v is not None]
            low = min(known) if known else None
            behind = [k for k, v in lasts.items()
                      if (v is None and known) or (v is not None and v == low)]
            stalled = behind if low is not None and len(set(known)) > 1 else \
                [k for k in lasts if lasts[k] is None] or list(lasts)
        parts = []
        for k in sorted(alive, key=lambda k: (k not in stalled, k)):
            if k not in stalled and k not in self.logging and k not in frozen:
                continue
            task = self.tasks[k]
            label = f"rank {k}" if task.role == "worker" else f"rank {k} ({task.role})"
            tail = self.tails[k]
            if tail.header is None:
                where = "with no log"
            elif tail.last_iter is None:
                where = "before its first iteration"
            else:
                where = f"at iteration {tail.last_iter}"
            beat = (f" (no heartbeat for {now - self.beats[k][1]:.0f} s)" if k in frozen
                    else f" ({','.join(self.down[k][0])} down)" if k in self.down
                    else " (heartbeat alive)" if k in self.beats else "")
            word = "stalled" if k in stalled else "waiting"
            parts.append(f"{label} on {node_of(k)} {word} {where}{beat}")
        blamed = sorted({node_of(k) for k in stalled if k in frozen or k in cut} - {"?"})
        everyone = {node_of(k) for k in alive}
        return Hang(f"{what}: {'; '.join(parts)}",
                    blamed if blamed and set(blamed) != everyone else [])
