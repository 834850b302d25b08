"""Gather: the rank logs of runs, as the merge reads them, and what their footers say.

Whether a run really succeeded is decided from its logs by ``verdict`` (a scheduler's
COMPLETED only means the job script exited 0); its names are re-exported here for the readers
of a run's logs. The merge reads each log once, with ``protocol.read_rank_log(...,
raw_iters=True)``: header and footer parsed, iteration lines left raw for ``tables``.
"""

from __future__ import annotations

import json
import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import protocol
from ..protocol import PHASES, RankLog
from ..runs.verdict import CHECKSUM_RTOL, failure_reason, read_run_logs, tail, verdict

__all__ = ["CHECKSUM_RTOL", "PHASES", "RankLog", "failure_reason", "footer_facts",
           "read_run_logs", "scan_run_logs", "scan_runs_logs", "tail", "verdict"]

_READERS = 4  # files read by threads: reading releases the GIL


def scan_run_logs(rdir: Path) -> list[RankLog]:
    """A run's rank logs, their iteration lines raw (``segments``)."""
    return [protocol.read_rank_log(Path(p), raw_iters=True)
            for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]


def scan_runs_logs(rdirs: list[Path]) -> list[list[RankLog]]:
    """:func:`scan_run_logs` of many runs, the files read by threads (reading releases the
    GIL, and page faults on fresh buffers are half of reading)."""
    paths = [[Path(p) for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]
             for rdir in rdirs]
    flat = [p for ps in paths for p in ps]
    if len(flat) < 8:
        scanned = [protocol.read_rank_log(p, raw_iters=True) for p in flat]
    else:
        with ThreadPoolExecutor(_READERS) as pool:
            scanned = list(pool.map(lambda p: protocol.read_rank_log(p, raw_iters=True), flat))
    out, i = [], 0
    for ps in paths:
        out.append(scanned[i:i + len(ps)])
        i += len(ps)
    return out


def footer_facts(logs: list[RankLog]) -> dict:
    """Per-run facts from the rank footers: memory, versions, checksum agreement."""
    footers = [log.footer for log in logs if log.footer]
    rss = [f.get("peak_rss_bytes") for f in footers if f.get("peak_rss_bytes")]
    device = [f.get("peak_device_bytes") for f in footers if f.get("peak_device_bytes")]
    sums = [f.get("param_checksum") for f in footers if f.get("param_checksum") is not None]
    first = footers[0] if footers else {}
    reasons = sorted({f[protocol.COMM_TOTAL_REASON] for f in footers
                      if f.get(protocol.COMM_TOTAL_REASON)})
    return {
        # Peak host memory per rank: the largest rank's and the mean over ranks.
        "peak_rss_bytes": max(rss) if rss else None,
        "peak_rss_bytes_mean": sum(rss) / len(rss) if rss else None,
        "peak_device_bytes": max(device) if device else None,  # GPU memory, where CUDA exists
        "peak_device_bytes_mean": sum(device) / len(device) if device else None,
        # Why the run has no t_comm_total (a mode that cannot see it), so a
        # missing total reads as a known limit, not a lost measurement.
        protocol.COMM_TOTAL_REASON: "; ".join(reasons) if reasons else None,
        # The last bucket's bytes: the gradient sent after backward (torch-ddp's footer).
        "comm_tail_bytes": (first.get("comm_bucket_bytes") or [None])[-1],
        "versions": json.dumps(first.get("versions") or {}, sort_keys=True),
        "param_checksum": sums[0] if sums else None,
        "checksums_agree": (all(math.isclose(s, sums[0], rel_tol=CHECKSUM_RTOL, abs_tol=1e-9)
                                for s in sums) if sums else None),
    }


